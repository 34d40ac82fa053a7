"""What a learning run bought with its privacy: test metric over steps against two baselines.

* netdp: the mean over nodes of the test metric of θ_v^t, read from the models the nodes sent
  (round t·K carries θ_v after step t's noisy gradient) and, at the end, their outputs;
* central: a trusted aggregator that averages the n clipped gradients of the same batches and
  adds the noise of their mean, N(0, σ²/n) (what perfect gossip of the noisy gradients gives);
* local: every node alone, with its own noise N(0, σ²) every step (no collaboration);
* initial: the public starting model θ = 0, where every curve starts (for accuracy, the share
  of the test set's +1 labels: what a model that learned nothing scores).
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
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.tasks.registry import task_spec

TEST_FILE = "test.npz"
BASELINE_SEED = 0


def utility_report(params: MuffliatoGDParams, logs: dict[int, NodeLog], data_dir: Path) -> dict[str, object]:
    """The report's `utility` block: the metric per step for netdp, central and local."""
    n = len(logs)
    test_x, test_y = node_data.load_learning_data(Path(data_dir) / TEST_FILE, params.dimension)
    shards = [LocalData(*node_data.load_learning_data(node_data_file(data_dir, v), params.dimension)) for v in range(n)]
    rng = np.random.default_rng(BASELINE_SEED)
    return {
        "metric": task_spec(params.task).metric_name,
        "test_examples": int(len(test_y)),
        "steps": list(range(1, params.steps + 1)),
        "netdp": _run_curve(params, logs, test_x, test_y),
        "central": central_curve(params, shards, test_x, test_y, rng),
        "local": _local_curve(params, shards, test_x, test_y, rng),
        "initial": metric(params.task, np.zeros(params.dimension), test_x, test_y),
        "baselines": f"simulated from the training files, seed {BASELINE_SEED}",
    }


def _run_curve(params: MuffliatoGDParams, logs: dict[int, NodeLog], x: np.ndarray, y: np.ndarray) -> list[float]:
    """Mean test metric of the nodes' models after each step: as sent, the output at the end.

    Step t's first gossip round (t·K, t from 0) sends θ_v after t + 1 noisy gradients, so it
    gives the entry of step t + 1; the last step's entry is the output, after its gossip.
    """
    per_step: list[list[float]] = [[] for _ in range(params.steps)]
    for log in logs.values():
        sent = {key.id.round: record for key, record in log.sent.items()}
        for step in range(params.steps - 1):
            record = sent.get(step * params.gossip_rounds)
            if record is not None:
                per_step[step].append(metric(params.task, from_tensor(record.payload)[: params.dimension], x, y))
        if log.final_output is not None and log.final_output.rounds_completed == params.steps:
            per_step[-1].append(metric(params.task, from_tensor(log.final_output.value)[: params.dimension], x, y))
    return [float(np.mean(values)) if values else float("nan") for values in per_step]


def _step(params: MuffliatoGDParams, model: np.ndarray, shard: LocalData, step: int) -> np.ndarray:
    x, y = shard.batch(step, params.batch)
    return clipped_gradient(params.task, model, x, y, clip=params.clip, regularization=params.regularization).value


def central_curve(params: MuffliatoGDParams, shards: list[LocalData], x: np.ndarray, y: np.ndarray,
                  rng: np.random.Generator) -> list[float]:
    """The trusted aggregator's test metric after every step: the mean clipped gradient plus N(0, σ²/n)."""
    model, curve = np.zeros(params.dimension), []
    n = len(shards)
    for step in range(params.steps):
        gradient = np.mean([_step(params, model, shard, step) for shard in shards], axis=0)
        model = model - params.learning_rate * (gradient + rng.normal(0.0, params.sigma / np.sqrt(n), model.shape))
        curve.append(metric(params.task, model, x, y))
    return curve


def _local_curve(params: MuffliatoGDParams, shards: list[LocalData], x: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator) -> list[float]:
    models, curve = [np.zeros(params.dimension) for _ in shards], []
    for step in range(params.steps):
        models = [model - params.learning_rate * (_step(params, model, shard, step)
                                                  + rng.normal(0.0, params.sigma, model.shape))
                  for model, shard in zip(models, shards)]
        curve.append(float(np.mean([metric(params.task, model, x, y) for model in models])))
    return curve
