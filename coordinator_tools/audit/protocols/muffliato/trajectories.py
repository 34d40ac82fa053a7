"""Recompute every node's values of a synchronous Muffliato run and compare them with its logs.

The rows are the transcript's `realized_row`, the very rows the accountants assume, so
agreement with the logged payloads checks the accountants' model of the run, not just the
nodes. Muffliato-GD recomputes its gossip rounds here too, each step opened with its node's
noisy gradient step (`recompute_trajectories`'s `open_step`), and compares them the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.trajectories import (
    TRAJECTORY_RTOL,
    PayloadComparison,
    TrajectoryCheck,
    missing_inputs,
)
from node.mixing import accelerated_step
from node.protocols.muffliato import NOISE_PURPOSE

StepOpening = Callable[[int, int, np.ndarray], np.ndarray | None]
"""(node, step, its model after the step before) -> the value its step's first round sends; None: it opened no
such step."""


def inputs_needed(transcript: Transcript) -> set[int]:
    """The nodes whose private logs the recomputation needs: every one that completed a round or was heard."""
    senders = {w for messages in transcript.received for w, _ in messages}
    return {v for v in range(transcript.n) if transcript.completed_rounds(v) > 0} | senders


def recompute_trajectories(transcript: Transcript, initial: Mapping[int, np.ndarray],
                           open_step: StepOpening | None = None) -> dict[int, list[np.ndarray]]:
    """Values x_v^0..x_v^{T_v} of every node in `initial`, from x^0 and the transcript's realized rows.

    A node left out of `initial` (it never ran) must be mixed by no one. With `open_step` (Muffliato-GD)
    the rounds come in steps of `transcript.rounds_per_step`: the value after a step's last round is
    the node's model, the next step opens with `open_step`'s value (none: the node's values stop
    there), and its recursion starts afresh with a plain round, as `node.protocols.gossip.run_gossip`'s.
    """
    period = transcript.rounds if open_step is None else transcript.rounds_per_step
    values = {node: [np.asarray(initial[node], dtype=np.float64)] for node in initial}
    for t in range(transcript.rounds):
        following = {}
        for node, trajectory in values.items():
            if transcript.completed_rounds(node) <= t or len(trajectory) <= t:
                continue
            row = transcript.realized_row(node, t)
            try:
                mixed = sum(weight * values[peer][t] for peer, weight in row.items())
            except (KeyError, IndexError):
                raise ValueError(f"node {node} used a round-{t} value the transcript cannot produce") from None
            plain = t % period == 0 or not transcript.accelerated
            value = mixed if plain else accelerated_step(trajectory[t - 1], mixed, transcript.omega)
            if open_step is not None and (t + 1) % period == 0 and t + 1 < transcript.rounds:
                value = open_step(node, (t + 1) // period, value)
            if value is not None:
                following[node] = value
        for node, value in following.items():
            values[node].append(value)
    return values


def compare_with_logs(replay: Replay, values: Mapping[int, list[np.ndarray]], comparison: PayloadComparison) -> None:
    """Every round value a log sent, received or refused, and every output, against the recomputed `values`.

    An output counts its run's steps (`rounds_per_step` rounds each): it is the value after them.
    """
    per_step = replay.realized.rounds_per_step
    for node, log in replay.logs.items():
        logged = [(node, key.id.round, sent.payload, "sent") for key, sent in log.sent.items()]
        logged += [(key.peer, key.id.round, payload, "received") for key, payload in log.values_in_view().items()]
        if log.final_output is not None:
            logged.append((node, int(log.final_output.rounds_completed) * per_step, log.final_output.value,
                           "final_output"))
        for owner, t, tensor, kind in logged:
            if t >= len(values.get(owner, ())):
                comparison.unexplained(node, f"{kind} record holds x_{owner}^{t}, which the transcript never computes")
            else:
                comparison.compare(node, tensor, values[owner][t], f"{kind} record of x_{owner}^{t}")


def check_trajectories(replay: Replay, *, rtol: float = TRAJECTORY_RTOL) -> TrajectoryCheck:
    """Recompute every node's values from its private input and noise and compare with the logs."""
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    private, transcript = replay.private, replay.realized
    failed = missing_inputs(inputs_needed(transcript), set(private.inputs))
    if failed is not None:
        return failed
    initial = {node: private.inputs[node] + private.draw(node, NOISE_PURPOSE) for node in private.inputs}
    values = recompute_trajectories(transcript, initial)
    comparison = PayloadComparison(max(float(np.max(np.abs(x))) for x in initial.values()), rtol)
    compare_with_logs(replay, values, comparison)
    return comparison.result()
