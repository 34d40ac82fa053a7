"""The AISTATS 2018 synthetic task as generated and written: its agents, data, weights and published topology."""

from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.cli import main
from coordinator_tools.dataprep.learning_data import node_train_file
from coordinator_tools.dataprep.personalized_task import (
    generate_task,
    load_task_info,
    load_test_sets,
    targets,
    task_topology,
    write_task,
)
from node.protocols.personalized_cd import PersonalizedCDParams, load_agent_data
from node.topology import load_topology

N, P = 100, 5


@pytest.fixture(scope="module")
def task():
    return generate_task(N, P, seed=11)


def test_agents_get_10_to_100_points_in_the_unit_ball_labelled_by_their_target_with_5_percent_noise(task) -> None:
    sizes = np.array(task.info.train_sizes)
    assert sizes.min() >= 10 and sizes.max() <= 100 and len(np.unique(sizes)) > 30
    separators = targets(np.array(task.info.angles), P)
    flipped = []
    for share, test, separator, size in zip(task.train, task.test, separators, sizes):
        assert len(share.y) == size and len(test.y) == 100
        assert np.linalg.norm(share.x, axis=1).max() <= 1.0
        truth = np.where(share.x @ separator >= 0, 1.0, -1.0)
        flipped.append(share.y != truth)
        assert np.array_equal(test.y, np.where(test.x @ separator >= 0, 1.0, -1.0))  # test labels are clean
    rate = np.concatenate(flipped).mean()
    assert abs(rate - 0.05) < 4 * math.sqrt(0.05 * 0.95 / sizes.sum())


def test_the_graph_keeps_exactly_the_non_negligible_similarities_and_is_connected(task) -> None:
    angles = np.array(task.info.angles)
    similarity = np.exp((np.cos(angles[:, None] - angles[None, :]) - 1) / 0.1)
    kept = {(u, v) for u in range(N) for v in range(u + 1, N) if similarity[u, v] >= 1e-3}
    assert set(task.weights) == kept
    assert task.weights == pytest.approx({edge: similarity[edge] for edge in kept})
    assert nx.is_connected(task.graph())


def test_the_published_weights_are_the_similarities_scaled_to_rows_of_at_most_one(task) -> None:
    params = PersonalizedCDParams(dimension=P, mu=1.0, max_examples=100, updates=5, epsilon=5.0)
    topology = task_topology(task, params, run_id="task")
    sums = [1.0 - topology.weight_row(v)[v] for v in range(N)]
    assert max(sums) == pytest.approx(1.0) and min(sums) > 0.0
    scale = max(sums) / max(sum(w for edge, w in task.weights.items() if v in edge) for v in range(N))
    assert topology.edge_weights == pytest.approx(
        {**{edge: w * scale for edge, w in task.weights.items()},
         **{(v, u): w * scale for (u, v), w in task.weights.items()}})


def test_the_written_task_reads_back_for_the_nodes_and_the_auditor(task, tmp_path: Path) -> None:
    write_task(task, tmp_path)
    params = PersonalizedCDParams(dimension=P, mu=1.0, max_examples=100, updates=5)
    assert load_task_info(tmp_path) == task.info
    for v in (0, 57, N - 1):
        share = load_agent_data(node_train_file(tmp_path, v), params)
        assert np.array_equal(share.x, task.train[v].x) and np.array_equal(share.y, task.train[v].y)
    tests = load_test_sets(tmp_path, P)
    assert len(tests) == N and all(np.array_equal(a.x, b.x) for a, b in zip(tests, task.test))


def test_the_same_seed_gives_the_same_task_and_another_seed_another() -> None:
    first, again, other = generate_task(20, P, 3), generate_task(20, P, 3), generate_task(20, P, 4)
    assert first.info == again.info and first.weights == again.weights
    assert first.info.angles != other.info.angles


def test_data_personalized_writes_the_task_and_topology_import_publishes_its_weights(tmp_path: Path) -> None:
    assert main(["data", "personalized", "--n", "30", "--dimension", "4", "--seed", "2",
                 "--out", str(tmp_path / "task")]) == 0
    assert main(["topology", "import", str(tmp_path / "task" / "similarity.edges"), "--protocol", "personalized-cd",
                 "--dimension", "4", "--mu", "1", "--max-examples", "100", "--updates", "3", "--epsilon", "2",
                 "--out", str(tmp_path / "topology.json")]) == 0
    published = load_topology(tmp_path / "topology.json")
    task = generate_task(30, 4, seed=2)
    assert load_task_info(tmp_path / "task") == task.info
    expected = task_topology(task, published.protocol, run_id="same")
    assert published.edge_weights == pytest.approx(expected.edge_weights, rel=1e-15)
