"""What a random-walk DP-SGD run bought with its privacy: the walk's model over steps against two baselines.

* netdp: the test metric of θ_t along the walk, read from the models the holders handed on (a
  step kept by its holder leaves no message: that point is missing) and the last holder's output;
* central: a trusted curator running the same T noisy steps, each on a node drawn uniformly (the
  walk's stationary distribution), the same noise N(0, σ²) per step;
* local: every node alone, taking its T/n steps (one every n steps) with the same noise;
* initial: the public starting model θ = 0.
The baselines are simulated from the nodes' training files with a seeded generator (an
experiment, so reproducible), on the run's published parameters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from coordinator_tools.audit.records import NodeLog
from node import data as node_data
from node.codec import from_tensor
from node.data import node_data_file
from node.learning import LocalData, clipped_gradient, metric
from node.protocols.rw_sgd import MODEL_TOKEN_ID, RwSgdParams
from node.tasks.registry import task_spec

TEST_FILE = "test.npz"
BASELINE_SEED = 0


def utility_report(params: RwSgdParams, logs: dict[int, NodeLog], final_holder: int | None,
                   data_dir: Path) -> dict[str, object]:
    """The report's `utility` block: the metric per step for netdp, central and local."""
    n = len(logs)
    x, y = node_data.load_learning_data(Path(data_dir) / TEST_FILE, params.dimension)
    shards = [LocalData(*node_data.load_learning_data(node_data_file(data_dir, v), params.dimension)) for v in range(n)]
    rng = np.random.default_rng(BASELINE_SEED)
    walk = [None if np.isnan(value) else value for value in _walk_curve(params, logs, final_holder, x, y)]
    return {
        "metric": task_spec(params.task).metric_name,
        "test_examples": int(len(y)),
        "steps": list(range(1, params.steps + 1)),
        "netdp": walk,
        "central": _central_curve(params, shards, x, y, rng),
        "local": _local_curve(params, shards, x, y, rng),
        "initial": metric(params.task, np.zeros(params.dimension), x, y),
        "final_holder": final_holder,
        "final_model_metric": walk[-1],
        "baselines": f"simulated from the training files, seed {BASELINE_SEED}",
    }


def _walk_curve(params: RwSgdParams, logs: dict[int, NodeLog], final_holder: int | None, x: np.ndarray,
                y: np.ndarray) -> list[float]:
    """θ after step t − 1 is the model handed on at hop t; the last entry is the last holder's output."""
    curve = [float("nan")] * params.steps
    for log in logs.values():
        for key, record in log.sent.items():
            if key.id.token_id == MODEL_TOKEN_ID and 1 <= key.id.hop <= params.steps - 1 and record.delivered:
                curve[key.id.hop - 1] = metric(params.task, from_tensor(record.payload)[: params.dimension], x, y)
    last = logs.get(final_holder) if final_holder is not None else None
    if last is not None and last.final_output is not None:
        curve[-1] = metric(params.task, from_tensor(last.final_output.value)[: params.dimension], x, y)
    return curve


def _noisy_step(params: RwSgdParams, model: np.ndarray, shard: LocalData, visit: int,
                rng: np.random.Generator) -> np.ndarray:
    bx, by = shard.batch(visit, params.batch)
    gradient = clipped_gradient(params.task, model, bx, by, clip=params.clip, regularization=params.regularization)
    return model - params.learning_rate * (gradient.value + rng.normal(0.0, params.sigma, model.shape))


def _central_curve(params: RwSgdParams, shards: list[LocalData], x: np.ndarray, y: np.ndarray,
                   rng: np.random.Generator) -> list[float]:
    model, curve = np.zeros(params.dimension), []
    visits = np.zeros(len(shards), dtype=int)
    for node in rng.integers(len(shards), size=params.steps):
        model = _noisy_step(params, model, shards[node], int(visits[node]), rng)
        visits[node] += 1
        curve.append(metric(params.task, model, x, y))
    return curve


def _local_curve(params: RwSgdParams, shards: list[LocalData], x: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator) -> list[float]:
    n = len(shards)
    models, curve = [np.zeros(params.dimension) for _ in shards], []
    for step in range(params.steps):
        node = step % n
        models[node] = _noisy_step(params, models[node], shards[node], step // n, rng)
        curve.append(float(np.mean([metric(params.task, model, x, y) for model in models])))
    return curve
