"""The learning-task registry: one entry per task in `netdp.tasks`, and every learning step going through it."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from coordinator_tools.dataprep import learning_data
from node import registration
from node.data import load_learning_data
from node.errors import ConfigError
from node.learning import clipped_gradient, example_gradients, loss, metric
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.tasks import registry
from node.tasks.base import FloatArray, RawExamples, TaskPlugin, TaskSpec
from node.topology import Topology
from tests.unit.test_topology_cli import assert_one_line_error, run

BUILT_IN = ("least_squares", "logistic", "recommendation")


class AbsoluteTask(TaskSpec):
    """|⟨θ, x⟩ − y| on real targets: a task netdp does not ship, registered only inside these tests."""

    labels = "regression"
    metric_name = "mae"

    def example_gradients(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> FloatArray:
        return np.sign(x @ theta - y)[:, None] * x

    def data_loss(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> float:
        return float(np.mean(np.abs(x @ theta - y)))

    def metric(self, theta: FloatArray, x: FloatArray, y: FloatArray) -> float:
        return self.data_loss(theta, x, y)


def constant_targets(size: int, dimension: int, rng: np.random.Generator) -> RawExamples:
    return RawExamples(rng.normal(size=(size, dimension)), np.full(size, 3.0), "all 3")


ABSOLUTE = TaskPlugin("absolute", AbsoluteTask(), "absolute error", datasets={"threes": constant_targets})


@pytest.fixture
def with_absolute(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as if a package registering `absolute` were installed."""
    plugins = {**registry.task_plugins(), "absolute": ABSOLUTE}
    monkeypatch.setattr(registry, "task_plugins", lambda: plugins)
    yield


def gd_params(task: str) -> MuffliatoGDParams:
    return MuffliatoGDParams(sigma=1.0, sensitivity=2.0, alpha=2.0, dimension=2, task=task, learning_rate=0.5,
                             clip=1.0, steps=2, gossip_rounds=1)


def test_netdps_own_tasks_are_registered_in_its_entry_point_group() -> None:
    assert registry.task_names() == BUILT_IN
    assert [(registry.task_spec(name).labels, registry.task_spec(name).metric_name) for name in BUILT_IN] == [
        ("regression", "mse"), ("classification", "accuracy"), ("regression", "rmse")]
    assert registry.task_plugins() is registry.task_plugins()  # scanned once


def test_the_built_in_tasks_compute_their_closed_forms() -> None:
    rng = np.random.default_rng(3)
    theta, x = rng.normal(size=2), rng.normal(size=(5, 2))
    labels, targets = np.where(rng.random(5) < 0.5, 1.0, -1.0), rng.normal(size=5)
    margins = labels * (x @ theta)
    assert np.allclose(example_gradients("logistic", theta, x, labels),
                       (-labels / (1.0 + np.exp(margins)))[:, None] * x, rtol=1e-12)
    assert loss("logistic", theta, x, labels) == pytest.approx(np.mean(np.log1p(np.exp(-margins))), rel=1e-12)
    assert metric("logistic", theta, x, labels) == np.mean(np.sign(x @ theta) == labels)
    residuals = x @ theta - targets
    assert loss("least_squares", theta, x, targets, regularization=0.5) == pytest.approx(
        0.5 * np.mean(residuals ** 2) + 0.25 * theta @ theta, rel=1e-12)
    assert metric("least_squares", theta, x, targets) == pytest.approx(np.mean(residuals ** 2), rel=1e-12)
    assert metric("recommendation", theta, x, targets) == pytest.approx(np.sqrt(np.mean(residuals ** 2)), rel=1e-12)


def test_a_protocols_task_is_a_registered_name() -> None:
    assert gd_params("least_squares").model_dump()["task"] == "least_squares"  # a plain string in the topology
    with pytest.raises(ValidationError, match="unknown learning task 'absolute'; registered: least_squares, logistic"):
        gd_params("absolute")
    with pytest.raises(ConfigError, match="unknown learning task 'absolute'"):
        registry.task_spec("absolute")


def test_topology_generate_refuses_a_task_that_is_not_installed(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "topology", "generate", "ring", "--n", "4", "--protocol", "muffliato-gd", "--task",
                       "hinge", "--steps", "2", "--gossip-rounds", "1", "--batch", "4",
                       "--out", str(tmp_path / "t.json"))
    assert_one_line_error(code, err,
                          "argument --task: unknown learning task 'hinge'; registered: least_squares, logistic")


@pytest.mark.usefixtures("with_absolute")
def test_a_registered_task_is_what_every_step_computes(tmp_path: Path) -> None:
    assert gd_params("absolute").task == "absolute"
    theta, x, y = np.zeros(2), np.array([[3.0, 4.0], [0.3, 0.4]]), np.array([1.0, -1.0])
    step = clipped_gradient("absolute", theta, x, y, clip=1.0)
    assert np.allclose(step.value, np.mean([[-0.6, -0.8], [0.3, 0.4]], axis=0)) and step.clipped == 1
    assert loss("absolute", theta, x, y) == metric("absolute", theta, x, y) == 1.0
    np.savez(tmp_path / "share.npz", x=x, y=np.array([0.5, 2.0]))
    assert load_learning_data(tmp_path / "share.npz", 2, task="absolute")[1].tolist() == [0.5, 2.0]  # real targets
    with pytest.raises(ConfigError, match="classification labels must be -1 or \\+1, found 0.5"):
        load_learning_data(tmp_path / "share.npz", 2, task="logistic")


@pytest.mark.usefixtures("with_absolute")
def test_data_split_draws_a_dataset_a_task_brings() -> None:
    nodes = [{"id": v, "address": f"127.0.0.1:{6000 + v}"} for v in (0, 1)]
    document = {"run_id": "t", "graph": "path", "nodes": nodes,
                "edges": [{"u": 0, "v": 1, "weight": 0.5}], "spectral_gap": 1.0, "gamma": 1.0,
                "protocol": gd_params("absolute").model_dump()}
    topology = Topology.model_validate(document)
    shares, test, info, labels = learning_data.split_dataset("threes", topology, seed=0, partition="iid", skew=None,
                                                             options=learning_data.SourceOptions(size=20))
    assert (info.dataset, info.task, info.dimension, labels) == ("threes", "regression", 2, "all 3")
    assert sum(len(share.y) for share in shares) + len(test.y) == 20
    with pytest.raises(ConfigError, match="--label-noise does not apply to dataset 'threes'"):
        learning_data.split_dataset("threes", topology, seed=0, partition="iid", skew=None,
                                    options=learning_data.SourceOptions(label_noise=0.1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(learning_data, "task_datasets", lambda: {"digits": ("absolute", constant_targets)})
        with pytest.raises(ConfigError, match="task 'absolute' brings a dataset called 'digits', a built-in source"):
            learning_data.load_source("digits", learning_data.SourceOptions(), np.random.default_rng(0), 2)
    logistic = Topology.model_validate({**document, "protocol": gd_params("logistic").model_dump()})
    with pytest.raises(ConfigError, match="threes is a regression task; the topology's muffliato-gd uses the "
                                          "logistic loss"):
        learning_data.split_dataset("threes", logistic, seed=0, partition="iid", skew=None,
                                    options=learning_data.SourceOptions())


def test_a_broken_or_clashing_task_entry_is_a_one_line_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    own = EntryPoint("logistic", "node.tasks.linear:LOGISTIC", registry.ENTRY_POINT_GROUP)
    entries = {
        "task 'ghost' .* cannot be loaded": [EntryPoint("ghost", "no_such_module:PLUGIN", registry.ENTRY_POINT_GROUP)],
        "is not a TaskPlugin": [EntryPoint("odd", "node.tasks.linear:LogisticTask", registry.ENTRY_POINT_GROUP)],
        "registers a task called 'logistic'": [EntryPoint("other", own.value, registry.ENTRY_POINT_GROUP)],
        "task 'logistic' is registered twice": [own, own],
    }
    for message, listed in entries.items():
        monkeypatch.setattr(registration, "entry_points", lambda group, listed=listed: listed)
        with pytest.raises(ConfigError, match=message):
            registry.task_plugins.__wrapped__()
