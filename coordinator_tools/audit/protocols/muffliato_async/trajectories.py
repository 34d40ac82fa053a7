"""Check a randomized Muffliato replay against its own numbers.

* Conservation (public logs): a committed exchange replaces two values by their mean, so the
  two values after it add up to the two that crossed; with private logs, the sum of all
  outputs is the sum of the noisy inputs plus what half-applied exchanges changed.
* Trajectories (private logs): every node's value recomputed along the schedule from x + η
  reproduces every logged value, value-after and output, which shows the schedule (and so
  the accountants' model) is what ran.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.checks import Check
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.muffliato_async.records import VALUE_KINDS
from coordinator_tools.audit.protocols.muffliato_async.schedule import ExchangeSchedule, walk
from coordinator_tools.audit.records import carries_value
from coordinator_tools.audit.trajectories import TRAJECTORY_RTOL, PayloadComparison, TrajectoryCheck, missing_inputs
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.mailboxes.exchange_desk import ACCEPT
from node.protocols.muffliato_async import NOISE_PURPOSE

Slot = tuple[int, str]  # (node, exchange id)
CONSERVATION_CHECK = "committed exchanges conserve the sum of values"


@dataclass(frozen=True)
class Recomputed:
    """Every node's value before and after each of its exchanges, and at the end."""

    before: dict[Slot, np.ndarray]
    after: dict[Slot, np.ndarray]  # only where the node applied the exchange
    final: np.ndarray


def recompute(schedule: ExchangeSchedule, initial: np.ndarray) -> Recomputed:
    """Walk the schedule from the noisy inputs (one row per node)."""
    state = np.array(initial, dtype=np.float64)
    before: dict[Slot, np.ndarray] = {}
    after: dict[Slot, np.ndarray] = {}
    for index, value_a, value_b in walk(schedule, state):
        exchange = schedule.exchanges[index]
        mean = (value_a + value_b) / 2
        for node, value in ((exchange.initiator, value_a), (exchange.responder, value_b)):
            before[(node, exchange.exchange_id)] = value
            if exchange.applied(node):
                after[(node, exchange.exchange_id)] = mean
    return Recomputed(before, after, state)


def check_trajectories(replay: Replay, *, rtol: float = TRAJECTORY_RTOL) -> TrajectoryCheck:
    """Recompute every node's values from its private input and noise and compare with the logs."""
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    schedule, private = replay.realized, replay.private
    failed = missing_inputs(_needed(replay), set(private.inputs))
    if failed is not None:
        return failed
    initial = _initial(replay)
    values = recompute(schedule, initial)
    comparison = PayloadComparison(_scale(initial, private.inputs), rtol)
    for node, log in replay.logs.items():
        logged = [(node, key, sent.payload) for key, sent in log.sent.items()]
        logged += [(key.peer, key, payload) for key, payload in log.values_in_view().items()]
        for owner, key, payload in logged:
            if key.kind in VALUE_KINDS and carries_value(payload):
                _compare(comparison, node, payload, values.before.get((owner, key.id.exchange_id)),
                         f"{key.kind} record of node {owner}'s value before exchange {key.id.exchange_id}")
        for event in log.of_kind("exchange"):
            if event.phase == "committed":
                _compare(comparison, node, event.value_after, values.after.get((node, event.exchange_id)),
                         f"node {node}'s value after exchange {event.exchange_id}")
        if log.final_output is not None:
            comparison.compare(node, log.final_output.value, values.final[node], f"node {node}'s output")
    return comparison.result()


def conservation_check(replay: Replay, *, rtol: float = TRAJECTORY_RTOL) -> Check:
    """Committed exchanges conserve the sum of the two values (public logs), and the run its total."""
    schedule = replay.realized
    crossed: dict[tuple[str, bool], np.ndarray] = {}  # (exchange id, initiator's value?) -> value
    after: dict[Slot, np.ndarray] = {}
    for node, log in replay.logs.items():
        for key, payload in [*((k, s.payload) for k, s in log.sent.items()), *log.values_in_view().items()]:
            if key.kind in VALUE_KINDS and carries_value(payload):
                crossed[(key.id.exchange_id, key.kind != ACCEPT)] = from_tensor(payload)
        for event in log.of_kind("exchange"):
            if event.phase == "committed":
                after[(node, event.exchange_id)] = from_tensor(event.value_after)
    checked, worst = 0, 0.0
    for exchange in schedule.by_status("committed"):
        xid = exchange.exchange_id
        parts = [crossed.get((xid, True)), crossed.get((xid, False)),
                 after.get((exchange.initiator, xid)), after.get((exchange.responder, xid))]
        if any(part is None for part in parts):
            continue
        x_a, x_b, after_a, after_b = parts
        scale = max(float(np.max(np.abs(part), initial=0.0)) for part in parts) or 1.0
        worst = max(worst, float(np.max(np.abs(after_a + after_b - x_a - x_b), initial=0.0)) / scale)
        checked += 1
    detail = (f"{checked} of {len(schedule.by_status('committed'))} committed exchanges checked from both logs, "
              f"max relative deviation {worst:.2g}")
    ok = worst <= rtol
    total = _total_deviation(replay)
    if total is not None:
        detail += f"; sum of outputs vs noisy inputs plus half-applied changes: {total:.2g}"
        ok = ok and total <= rtol
    return Check(CONSERVATION_CHECK, ok, detail)


def _total_deviation(replay: Replay) -> float | None:
    """Relative deviation of Σ outputs from Σ (x + η) plus the half-applied changes; None without the data."""
    private, schedule = replay.private, replay.realized
    outputs = replay.final_outputs
    if private is None or set(outputs) != set(range(schedule.n)) or set(private.inputs) != set(range(schedule.n)):
        return None
    initial = _initial(replay)
    values = recompute(schedule, initial)
    expected = initial.sum(axis=0)
    for exchange in schedule.by_status("half_applied"):
        node = exchange.initiator if exchange.initiator_applied else exchange.responder
        expected = expected + values.after[(node, exchange.exchange_id)] - values.before[(node, exchange.exchange_id)]
    return float(np.max(np.abs(sum(outputs.values()) - expected))) / (_scale(initial, private.inputs) or 1.0)


def _needed(replay: Replay) -> set[int]:
    """Nodes whose values some record holds or some applied exchange used."""
    schedule = replay.realized
    senders = {sender for view in schedule.received for sender, _ in view}
    appliers = {node for exchange in schedule.exchanges for node in (exchange.initiator, exchange.responder)
                if exchange.applied(node)}
    return senders | appliers | set(replay.final_outputs)


def _initial(replay: Replay) -> np.ndarray:
    """x + η of every node with a private log; NaN for the others (no record may use them)."""
    private, n = replay.private, replay.realized.n
    state = np.full((n, replay.topology.protocol.vector_length), np.nan)
    for node in private.inputs:
        state[node] = private.inputs[node] + private.draw(node, NOISE_PURPOSE)
    return state


def _scale(initial: np.ndarray, nodes: Iterable[int]) -> float:
    """The largest |x + η| of the nodes with private logs: deviations are relative to it."""
    return float(np.max(np.abs(initial[list(nodes)]), initial=0.0))


def _compare(comparison: PayloadComparison, node: int, logged: viewlog_pb2.Tensor, recomputed: np.ndarray | None,
             what: str) -> None:
    if recomputed is None:
        comparison.unexplained(node, f"{what} is logged, but the schedule never computes it")
    else:
        comparison.compare(node, logged, recomputed, what)
