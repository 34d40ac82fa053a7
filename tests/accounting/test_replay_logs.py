"""Replay of run directories: damaged, missing, foreign and inconsistent logs, and the transcript."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.records import Finding
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.replay_checks import replay_checks
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError, LogFormatError
from node.viewlog import VIEW_LOG_NAME, encode_record
from tests.accounting.simulated_run import (
    Faults,
    SimulatedRun,
    corrupt_record,
    rewrite_log,
    ring_topology,
    simulate_run,
    tear_tail,
)

LOST = Faults(lost_edge=(0, 1), lost_from=2)
CRASH = Faults(crashed=3, crash_round=2)


def view_log(run: SimulatedRun, node: int) -> Path:
    return run.rundir / f"node-{node}" / VIEW_LOG_NAME


def kinds(findings: tuple[Finding, ...], severity: str | None = None) -> set[tuple[str, int | None]]:
    return {(f.kind, f.node) for f in findings if severity is None or f.severity == severity}


def errors(replay: Replay) -> set[tuple[str, int | None]]:
    return kinds(replay.node_problems, "error") | kinds(replay.consistency, "error")


def used_without_last_round_of(run: SimulatedRun, node: int) -> tuple[tuple[frozenset[int], ...], ...]:
    """The true schedule as a replay can prove it when `node`'s log is lost: nobody sees x^T, so
    the node's final round is unprovable (and irrelevant to every view)."""
    return tuple(used[:-1] if v == node else used for v, used in enumerate(run.used))


def received_sets(run: SimulatedRun) -> list[set[tuple[int, int]]]:
    """Every (sender, round) value each node mixed in: all it received, in runs without a crash."""
    return [{(w, t) for t, used in enumerate(node) for w in used} for node in run.used]


def test_replay_clean_run_is_the_plan(tmp_path: Path) -> None:
    topology = ring_topology()
    run = simulate_run(tmp_path, topology)
    replay = replay_run(tmp_path)
    plan = planned_transcript(topology)
    assert replay.realized.used == plan.used
    assert replay.realized.received == plan.received
    assert replay.node_problems == () and replay.consistency == ()
    assert replay.sampler_kinds == {v: "simulation" for v in range(topology.n)}
    assert all((replay.final_outputs[v] == run.values[v][-1]).all() for v in range(topology.n))
    assert replay.private is None


def test_replay_rebuilds_drop_outs_as_used_sets(tmp_path: Path) -> None:
    run = simulate_run(tmp_path, ring_topology(), faults=LOST)
    replay = replay_run(tmp_path)
    assert replay.realized.used == run.used
    assert 1 not in replay.realized.used[0][2] and 1 in replay.realized.used[0][1]
    assert replay.realized.realized_row(0, 2)[0] > replay.realized.realized_row(0, 1)[0]
    assert errors(replay) == set()


def test_replay_reports_torn_tail_and_audits_records_before_it(tmp_path: Path) -> None:
    run = simulate_run(tmp_path, ring_topology(), faults=CRASH)
    tear_tail(view_log(run, 3))
    replay = replay_run(tmp_path)
    assert ("torn_tail", 3) in kinds(replay.node_problems, "warning")
    assert {(key.peer, key.id.round) for key in replay.logs[3].sent} == {(peer, t) for peer in (2, 4) for t in range(3)}
    assert replay.realized.used == run.used
    assert replay.realized.completed_rounds(3) == 2
    assert 3 in replay.realized.used[2][2] and 3 not in replay.realized.used[2][3]
    assert (3, 2) in replay.realized.received[4]
    assert errors(replay) == set()


def test_replay_infers_rounds_after_a_corrupt_record_from_the_peers(tmp_path: Path) -> None:
    run = simulate_run(tmp_path, ring_topology(), faults=LOST)
    # Record 0 is the header; rounds 0 and 1 take records 1-4 and 5-8 (two sends, two receptions).
    corrupt_record(view_log(run, 2), 7)
    replay = replay_run(tmp_path)
    damage = next(f for f in replay.node_problems if f.kind == "bad_checksum")
    assert (damage.node, damage.severity) == (2, "error") and "the 7 records before it are audited" in damage.detail
    assert replay.realized.inferred == {2: (1, 2, 3)}
    assert ("inferred_rounds", 2) in kinds(replay.consistency, "info")
    assert replay.realized.used == used_without_last_round_of(run, 2)
    assert set(replay.realized.received[2]) == received_sets(run)[2]
    assert kinds(replay.consistency, "error") == set()


def test_replay_detects_a_payload_that_differs_from_the_sent_one(tmp_path: Path) -> None:
    run = simulate_run(tmp_path, ring_topology())

    def flip_last_bit(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "received" and (record.received.peer, record.received.round) == (0, 3):
            data = bytearray(record.received.payload.data)
            data[0] ^= 1
            record.received.payload.data = bytes(data)
        return record

    rewrite_log(view_log(run, 1), flip_last_bit)
    replay = replay_run(tmp_path)
    mismatches = [f for f in replay.consistency if f.kind == "payload_mismatch"]
    assert [(f.node, f.severity) for f in mismatches] == [(1, "error")]
    assert "node 0's round-3 value to node 1" in mismatches[0].detail
    agree = next(c for c in replay_checks(replay) if c.name.startswith("sent and received"))
    assert not agree.ok and "payload_mismatch" in agree.detail


def test_replay_reports_delivered_message_missing_from_an_intact_log(tmp_path: Path) -> None:
    run = simulate_run(tmp_path, ring_topology())

    def drop_reception(record: viewlog_pb2.Record) -> viewlog_pb2.Record | None:
        is_it = record.WhichOneof("kind") == "received" and (record.received.peer, record.received.round) == (0, 2)
        return None if is_it else record

    rewrite_log(view_log(run, 1), drop_reception)
    replay = replay_run(tmp_path)
    assert {("delivered_not_received", 1), ("inferred_rounds", 1)} <= errors(replay)
    # The sender saw it delivered, so the value stays in node 1's view and schedule.
    assert (0, 2) in replay.realized.received[1]
    assert replay.realized.used == run.used


def test_replay_reports_missing_log_and_rebuilds_the_node_from_its_peers(tmp_path: Path) -> None:
    run = simulate_run(tmp_path, ring_topology(), faults=LOST)
    view_log(run, 4).unlink()
    replay = replay_run(tmp_path)
    assert ("missing_log", 4) in kinds(replay.node_problems, "error")
    assert 4 not in replay.logs
    assert replay.realized.used == used_without_last_round_of(run, 4)
    assert set(replay.realized.received[4]) == received_sets(run)[4]
    assert replay.to_json()["nodes"][4]["log"] == "unusable"
    logs = next(c for c in replay_checks(replay) if c.name.startswith("view logs"))
    assert not logs.ok and "missing_log" in logs.detail


def test_replay_leaves_out_a_log_of_another_topology(tmp_path: Path) -> None:
    run = simulate_run(tmp_path, ring_topology())

    def other_digest(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "header":
            record.header.topology_digest = "0" * 64
        return record

    rewrite_log(view_log(run, 2), other_digest)
    replay = replay_run(tmp_path)
    assert {("header_mismatch", 2), ("foreign_log", 2)} <= kinds(replay.node_problems, "error")
    assert 2 not in replay.logs
    assert replay.realized.used == used_without_last_round_of(run, 2)  # rebuilt from nodes 1 and 3


def test_replay_refuses_a_directory_without_topology_or_logs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="topology.json"):
        replay_run(tmp_path)
    run = simulate_run(tmp_path, ring_topology(n=3))
    for node in range(3):
        view_log(run, node).write_bytes(b"not a log")
    with pytest.raises(LogFormatError, match="no usable view log"):
        replay_run(tmp_path)



def test_a_record_of_an_unknown_kind_is_a_warning_not_damage(tmp_path: Path) -> None:
    """A newer writer's record kind (here field 31 of Record) is skipped by the reader and noted."""
    run = simulate_run(tmp_path, ring_topology())
    newer = viewlog_pb2.Record()
    newer.ParseFromString(b"\xfa\x01\x00")
    with open(view_log(run, 2), "ab") as log:
        log.write(encode_record(newer))
    replay = replay_run(tmp_path)
    assert [(f.kind, f.node, f.severity) for f in replay.node_problems] == [("unknown_record_kind", 2, "warning")]
    assert replay.realized.used == run.used and replay.consistency == ()
