"""A view is everything that reached the node: a value refused after its round closed is accounted.

Path 0-1-2-3, two plain rounds; node 1's round-1 value reaches node 2 after node 2 closed round 1.
Node 2 mixes without it (its weight goes to the self-loop) but logs it refused with its payload.
That value, (z_0 + z_1 + z_2)/3, lets node 2 (which knows z_1 from round 0 and its own z_2) solve
for z_0: the exact loss 0 -> 2 is the local-DP value, where without the refused value it is 0.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import networkx as nx
import pytest

from coordinator_tools.audit.protocols.muffliato.accountant import account
from coordinator_tools.audit.protocols.muffliato.trajectories import check_trajectories
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.replay_checks import replay_checks
from coordinator_tools.topology.build import build_topology
from netdp.v1 import viewlog_pb2
from node.protocols.muffliato import MuffliatoParams
from node.viewlog import VIEW_LOG_NAME
from tests.accounting.reference import drop
from tests.accounting.simulated_run import SIGMA, Faults, rewrite_log, simulate_run

LATE = Faults(late=(1, 2, 1))
OPTIONS = dict(sigma=SIGMA, sensitivity=1.0, alpha=2.0, delta=1e-5)


def path_topology():
    params = MuffliatoParams(sigma=SIGMA, sensitivity=1.0, alpha=2.0, rounds=2, accelerated=False, dimension=2)
    return build_topology(nx.path_graph(4), graph_name="path", run_id="refused-test", protocol=params)


def test_a_refused_value_is_in_the_view_and_accounted(tmp_path: Path) -> None:
    simulate_run(tmp_path, path_topology(), faults=LATE)
    replay = replay_run(tmp_path, with_private_logs=True)
    transcript = replay.realized
    assert 1 not in transcript.used[2][1]
    assert (1, 1) in transcript.received[2]
    assert [check for check in replay_checks(replay) if not check.ok] == []
    assert check_trajectories(replay).ok  # the refused payload is x_1^1, recomputed
    realized = account(transcript, **OPTIONS)
    unseen = dataclasses.replace(transcript, received=tuple(
        tuple(m for m in view if (v, m) != (2, (1, 1))) for v, view in enumerate(transcript.received)))
    without = account(unseen, **OPTIONS)
    assert realized.exact_rdp[0, 2] == realized.ldp_rdp and realized.reconstructable[0, 2]
    assert without.exact_rdp[0, 2] == 0.0
    assert realized.paper_rdp[0, 2] > without.paper_rdp[0, 2]
    # only the view changed: the used sets are those of a drop-out
    assert transcript.used == drop(planned_transcript(transcript.topology), 2, 1, 1).used


def test_a_refused_value_that_differs_from_the_sent_one_is_a_finding(tmp_path: Path) -> None:
    simulate_run(tmp_path, path_topology(), faults=LATE)

    def tamper(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "rejected":
            record.rejected.payload.data = bytes(len(record.rejected.payload.data))
        return record

    rewrite_log(tmp_path / "node-2" / VIEW_LOG_NAME, tamper)
    replay = replay_run(tmp_path)
    mismatches = [f for f in replay.consistency if f.kind == "payload_mismatch"]
    assert [(f.node, f.severity) for f in mismatches] == [(2, "error")]
    assert "node 1's round-1 value to node 2: refused payload differs" in mismatches[0].detail


@pytest.mark.parametrize("claimed", [3, 7])
def test_a_refused_value_claimed_by_someone_else_is_a_finding(tmp_path: Path, claimed: int) -> None:
    """Claimed by the other neighbour, it contradicts that neighbour's own round-1 value; claimed by a
    stranger, it is no neighbour's value and stays out of the view."""
    simulate_run(tmp_path, path_topology(), faults=LATE)

    def reassign(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "rejected":
            record.rejected.claimed_sender = claimed
        return record

    rewrite_log(tmp_path / "node-2" / VIEW_LOG_NAME, reassign)
    replay = replay_run(tmp_path)
    kinds = {(f.kind, f.severity) for f in (*replay.node_problems, *replay.consistency)}
    expected = ("payload_mismatch", "error") if claimed == 3 else ("refused_from_stranger", "warning")
    assert expected in kinds
