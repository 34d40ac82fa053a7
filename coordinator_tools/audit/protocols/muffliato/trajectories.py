"""Recompute every node's values of a synchronous Muffliato run and compare them with its logs.

The rows are the transcript's `realized_row`, the very rows the accountants assume, so
agreement with the logged payloads checks the accountants' model of the run, not just the
nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.trajectories import (
    TRAJECTORY_RTOL,
    PayloadComparison,
    TrajectoryCheck,
    missing_inputs,
)
from node.mixing import accelerated_step
from node.protocols.muffliato import NOISE_PURPOSE

if TYPE_CHECKING:
    from coordinator_tools.audit.replay import Replay


def recompute_trajectories(transcript: Transcript, initial: Mapping[int, np.ndarray]) -> dict[int, list[np.ndarray]]:
    """Values x_v^0..x_v^{T_v} of every node in `initial`, from x^0 and the transcript's realized rows.

    A node left out of `initial` (it never ran) must be mixed by no one.
    """
    values = {node: [np.asarray(initial[node], dtype=np.float64)] for node in initial}
    for t in range(transcript.rounds):
        following = {}
        for node, trajectory in values.items():
            if transcript.completed_rounds(node) <= t:
                continue
            row = transcript.realized_row(node, t)
            try:
                mixed = sum(weight * values[peer][t] for peer, weight in row.items())
            except (KeyError, IndexError):
                raise ValueError(f"node {node} used a round-{t} value the transcript cannot produce") from None
            plain = t == 0 or not transcript.accelerated
            following[node] = mixed if plain else accelerated_step(trajectory[t - 1], mixed, transcript.omega)
        for node, value in following.items():
            values[node].append(value)
    return values


def check_trajectories(replay: Replay, *, rtol: float = TRAJECTORY_RTOL) -> TrajectoryCheck:
    """Recompute every node's values from its private input and noise and compare with the logs."""
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    private, transcript = replay.private, replay.realized
    senders = {w for messages in transcript.received for w, _ in messages}
    needed = {v for v in range(transcript.n) if transcript.completed_rounds(v) > 0} | senders
    failed = missing_inputs(needed, set(private.inputs))
    if failed is not None:
        return failed
    initial = {node: private.inputs[node] + private.draw(node, NOISE_PURPOSE) for node in private.inputs}
    values = recompute_trajectories(transcript, initial)
    comparison = PayloadComparison(max(float(np.max(np.abs(x))) for x in initial.values()), rtol)
    for node, log in replay.logs.items():
        logged = [(node, key.id.round, sent.payload, "sent") for key, sent in log.sent.items()]
        logged += [(key.peer, key.id.round, payload, "received") for key, payload in log.values_in_view().items()]
        if log.final_output is not None:
            logged.append((node, int(log.final_output.rounds_completed), log.final_output.value, "final_output"))
        for owner, t, tensor, kind in logged:
            if t >= len(values[owner]):
                comparison.unexplained(node, f"{kind} record holds x_{owner}^{t}, which the transcript never computes")
            else:
                comparison.compare(node, tensor, values[owner][t], f"{kind} record of x_{owner}^{t}")
    return comparison.result()
