"""Recomputing every node's values from private logs along the replayed transcript."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.protocols.muffliato.trajectories import check_trajectories
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.records import PrivateSection
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.cluster.launch import TOPOLOGY_FILE
from coordinator_tools.dataprep.datasets import synthetic_values
from coordinator_tools.topology.build import build_topology
from node.codec import to_tensor
from node.noise import SimulationSampler
from node.protocols.muffliato import NOISE_PURPOSE, MuffliatoParams
from node.topology import NetworkParams, save_topology
from node.transport.inprocess import run_inprocess
from node.viewlog import PRIVATE_LOG_NAME
from tests.accounting.simulated_run import Faults, ring_topology, simulate_run, tear_tail

FAULTS = Faults(lost_edge=(0, 1), lost_from=2, crashed=3, crash_round=2)


def logged_payloads(replay) -> int:
    return sum(len(log.sent) + len(log.values_in_view()) + (log.final_output is not None)
               for log in replay.logs.values())


@pytest.mark.parametrize("accelerated", [True, False])
def test_replay_recomputation_reproduces_every_logged_payload(tmp_path: Path, accelerated: bool) -> None:
    run = simulate_run(tmp_path, ring_topology(accelerated=accelerated), faults=FAULTS)
    tear_tail(tmp_path / "node-3" / "view.log")
    replay = replay_run(tmp_path, with_private_logs=True)
    assert np.array_equal(replay.private.draw(5, NOISE_PURPOSE), run.noise[5])
    check = check_trajectories(replay)
    assert check.ok, check.mismatches
    assert check.compared == logged_payloads(replay) > 0
    assert check.max_relative_deviation < 1e-12


def test_replay_recomputation_rejects_the_planned_schedule_of_a_run_with_drop_outs(tmp_path: Path) -> None:
    topology = ring_topology()
    simulate_run(tmp_path, topology, faults=Faults(lost_edge=(0, 1), lost_from=2))
    replay = replay_run(tmp_path, with_private_logs=True)
    wrong = dataclasses.replace(replay, realized=planned_transcript(topology))
    check = check_trajectories(wrong)
    assert not check.ok
    assert {f.kind for f in check.mismatches} == {"payload_not_reproduced"}
    # Round 2 is the first that mixes differently, so x^0..x^2 still match and x^3 on do not.
    rounds = {int(re.search(r"\^(\d+) is off", f.detail).group(1)) for f in check.mismatches}
    assert rounds == {3, 4, 5}


def test_replay_recomputation_notices_a_different_noise_draw(tmp_path: Path) -> None:
    simulate_run(tmp_path, ring_topology())
    replay = replay_run(tmp_path, with_private_logs=True)
    (draw,) = replay.private.draws[0]
    shifted = type(draw)()
    shifted.CopyFrom(draw)
    shifted.value.CopyFrom(to_tensor(replay.private.draw(0, NOISE_PURPOSE) + 1e-6))
    draws = {**replay.private.draws, 0: (shifted,)}
    check = check_trajectories(dataclasses.replace(replay, private=PrivateSection(replay.private.inputs, draws)))
    assert not check.ok and check.max_relative_deviation > 1e-8


def test_replay_reads_private_logs_only_when_asked(tmp_path: Path) -> None:
    simulate_run(tmp_path, ring_topology())
    for node in range(6):
        (tmp_path / f"node-{node}" / PRIVATE_LOG_NAME).write_bytes(b"garbage")
    replay = replay_run(tmp_path)
    assert replay.private is None and replay.node_problems == ()
    with pytest.raises(ValueError, match="without private logs"):
        check_trajectories(replay)
    asked = replay_run(tmp_path, with_private_logs=True)
    assert {f.kind for f in asked.node_problems} == {"unreadable_log"}
    assert not check_trajectories(asked).ok


async def test_replay_of_real_nodes_in_process_with_an_absent_node(tmp_path: Path) -> None:
    """The node's own code writes the logs: the replay must read its semantics the same way."""
    topology = build_topology(
        nx.cycle_graph(5), graph_name="ring", run_id="replay-inprocess",
        protocol=MuffliatoParams(sigma=0.3, sensitivity=1.0, alpha=2.0, rounds=4, dimension=2),
        network=NetworkParams(round_deadline_s=0.3, startup_deadline_s=0.3),
    )
    save_topology(topology, tmp_path / TOPOLOGY_FILE)
    values = synthetic_values(topology.n, 2, 1.0, seed=3)
    await run_inprocess(topology, values, tmp_path, lambda v: SimulationSampler(100 + v), absent={2})
    replay = replay_run(tmp_path, with_private_logs=True)
    assert {(f.kind, f.node) for f in replay.node_problems} == {("missing_log", 2)}
    assert [f for f in replay.consistency if f.severity == "error"] == []
    assert all(2 not in replay.realized.used[v][t] for v in (1, 3) for t in range(4))
    assert replay.realized.completed_rounds(2) == 0
    assert all(replay.realized.completed_rounds(v) == 4 for v in (0, 1, 3, 4))
    check = check_trajectories(replay)
    assert check.ok, check.mismatches
    assert check.compared == logged_payloads(replay)

