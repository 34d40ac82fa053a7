"""Fuzzing the replay with one damaged view log: a finding, or the same schedule, never a silent change.

A small simulated run (tests/accounting/simulated_run.py) is replayed clean once. Hypothesis
then damages one node's view.log (a cut at any byte, flipped bits, records reordered,
duplicated or dropped, the header swapped with another record, a record spliced in from a
neighbour's log) and replays again. The replay may only raise the project's one-line
NetdpError. Otherwise either it reports an error or warning about the damaged node or a
neighbour, or it rebuilds exactly what the clean run shows: who used whose value in which
round, which messages each view holds, and the outputs it reports (a log cut just before
its output record reads like a node that died before writing it, so that output may be
missing, never different). Record order within a log carries no meaning for the replay
(records are keyed by peer and round), so a reordering is harmless unless flagged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.records import Finding
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from node.errors import NetdpError
from node.viewlog import VIEW_LOG_NAME
from tests.accounting.simulated_run import SimulatedRun, ring_topology, simulate_run
from tests.fuzz_builders import bit_sets, flip_bits, frame_starts, log_bytes, log_frames, rearrangements

FUZZ = settings(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
T = TypeVar("T")


@dataclass(frozen=True)
class CleanRun:
    """The undamaged run, its replay, and every node's view log as written."""

    run: SimulatedRun
    replay: Replay
    logs: tuple[bytes, ...] = field(repr=False)

    def log_path(self, node: int) -> Path:
        return self.run.rundir / f"node-{node}" / VIEW_LOG_NAME


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CleanRun]:
    run = simulate_run(tmp_path_factory.mktemp("replay-fuzz"), ring_topology(n=6, rounds=4))
    replay = replay_run(run.rundir)
    assert replay.node_problems == () and replay.consistency == ()
    yield CleanRun(run, replay, tuple((run.rundir / f"node-{v}" / VIEW_LOG_NAME).read_bytes()
                                      for v in range(run.topology.n)))


@dataclass(frozen=True)
class Damage:
    """One node's view log replaced by damaged bytes; `detail` says how, for failure reports."""

    node: int
    kind: str
    detail: str
    data: bytes = field(repr=False)


@st.composite
def damages(draw: st.DrawFn, clean: CleanRun) -> Damage:
    node = draw(st.integers(0, clean.run.topology.n - 1))
    original = clean.logs[node]
    frames = log_frames(original)
    kind = draw(st.sampled_from(["cut", "flip", "rearrange", "splice"]))
    if kind == "cut":
        at_a_boundary = st.sampled_from(frame_starts(frames)[:-1])  # the rest reads as a whole, shorter log
        cut = draw(st.one_of(at_a_boundary, st.integers(0, len(original) - 1)))
        return Damage(node, kind, f"cut at byte {cut} of {len(original)}", original[:cut])
    if kind == "flip":
        bits = draw(bit_sets(len(original)))
        return Damage(node, kind, f"bits {sorted(bits)} flipped", flip_bits(original, bits))
    if kind == "rearrange":
        rearrangement = draw(rearrangements(len(frames)))
        return Damage(node, rearrangement.kind, f"frames in order {rearrangement.order}",
                      log_bytes(rearrangement.apply(frames)))
    neighbour = draw(st.sampled_from(clean.run.topology.neighbours[node]))
    taken = draw(st.integers(0, len(log_frames(clean.logs[neighbour])) - 1))
    position = draw(st.one_of(st.just(len(frames)), st.integers(0, len(frames))))
    frames.insert(position, log_frames(clean.logs[neighbour])[taken])
    return Damage(node, kind, f"frame {taken} of node {neighbour}'s log inserted at {position}", log_bytes(frames))


def with_damage(clean: CleanRun, damage: Damage, action: Callable[[], T]) -> T:
    """Run `action` on the run directory while one log holds the damaged bytes, then restore it."""
    path = clean.log_path(damage.node)
    path.write_bytes(damage.data)
    try:
        return action()
    finally:
        path.write_bytes(clean.logs[damage.node])


def replay_or_error(clean: CleanRun, damage: Damage) -> Replay | NetdpError:
    try:
        return with_damage(clean, damage, lambda: replay_run(clean.run.rundir))
    except NetdpError as error:
        return error


def flagged(replay: Replay) -> list[Finding]:
    """Errors and warnings: what a person reading the audit is told to look at."""
    return [f for f in (*replay.node_problems, *replay.consistency) if f.severity in ("error", "warning")]


def check_damage(clean: CleanRun, damage: Damage) -> Replay | NetdpError:
    """Replay with the damage; assert it is flagged near the damaged node or changes nothing."""
    outcome = replay_or_error(clean, damage)
    if isinstance(outcome, NetdpError):
        assert str(outcome) and "\n" not in str(outcome)
        return outcome
    near = {damage.node, *clean.run.topology.neighbours[damage.node]}
    findings = flagged(outcome)
    assert all(finding.node in near for finding in findings), findings
    if findings:
        return outcome
    expected, got = clean.replay.realized, outcome.realized
    assert got.used == expected.used
    assert [set(view) for view in got.received] == [set(view) for view in expected.received]
    assert got.inferred == expected.inferred
    outputs, clean_outputs = outcome.final_outputs, clean.replay.final_outputs
    assert set(clean_outputs) - set(outputs) <= {damage.node}
    assert all(outputs[v].tobytes() == clean_outputs[v].tobytes() for v in outputs)
    return outcome


@settings(FUZZ, max_examples=250)
@given(data=st.data())
def test_a_damaged_log_is_flagged_or_changes_nothing(clean: CleanRun, data: st.DataObject) -> None:
    damage = data.draw(damages(clean), label="damage")
    outcome = check_damage(clean, damage)
    verdict = "NetdpError" if isinstance(outcome, NetdpError) else "flagged" if flagged(outcome) else "silent"
    event(f"{damage.kind}: {verdict}")


Rebuild = Callable[[list[bytes], list[bytes]], list[bytes]]
# Node 0's log rebuilt from its own frames and node 1's, and the one finding kind expected (None: silent).
NAMED_DAMAGES: dict[str, tuple[Rebuild, str | None]] = {
    "records of every round in reverse order": (lambda own, _: [own[0], *own[:0:-1]], None),
    "log ends just before its final output": (lambda own, _: own[:-1], None),
    "a neighbour's final output appended": (lambda own, other: [*own, other[-1]], "duplicate_record"),
    "a neighbour's header appended": (lambda own, other: [*own, other[0]], "unexpected_record"),
}


@pytest.mark.parametrize("name", NAMED_DAMAGES)
def test_named_damages(clean: CleanRun, name: str) -> None:
    rebuild, kind = NAMED_DAMAGES[name]
    data = log_bytes(rebuild(log_frames(clean.logs[0]), log_frames(clean.logs[1])))
    outcome = check_damage(clean, Damage(0, "named", name, data))
    assert isinstance(outcome, Replay)
    assert {finding.kind for finding in flagged(outcome)} == ({kind} if kind else set())


@settings(FUZZ, max_examples=4)  # each audit draws its figures: about a second
@given(data=st.data())
def test_the_audit_reports_what_the_replay_found(clean: CleanRun, data: st.DataObject,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    damage = data.draw(damages(clean), label="damage")
    out = tmp_path_factory.mktemp("audit")
    try:
        report = with_damage(clean, damage, lambda: audit_run(clean.run.rundir, out, AuditOptions(attack_pairs="none")))
    except NetdpError as error:
        assert str(error) and "\n" not in str(error)
        return
    replay = replay_or_error(clean, damage)
    assert isinstance(replay, Replay)
    assert report["replay"] == replay.to_json()
    errors = [f for f in (*replay.node_problems, *replay.consistency) if f.severity == "error"]
    replay_checks = [c for c in report["checks"] if c["name"].startswith(("view logs", "sent and received"))]
    assert len(replay_checks) == 2
    assert all(check["ok"] for check in replay_checks) == (not errors)
