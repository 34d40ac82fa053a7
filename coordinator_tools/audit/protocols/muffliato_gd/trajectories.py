"""Recompute every model a Muffliato-GD/SGD node sent from its private log, and compare it with every log.

Node v's step s opens with θ_v^s − η (g_v^s + z_v^s): its model before the step (θ^0 = 0, public),
its logged clipped gradient of step s and its draw of step s. The K gossip rounds that follow are
synchronous Muffliato's along the transcript's realized rows (the per-step graph, drop-outs in the
self-loop), plain or Chebyshev as the topology says, restarted at every step as the nodes run them,
so the averaging check's `recompute_trajectories` does them, and `compare_with_logs` holds every
model sent, received or refused and every output against them. A node whose private log stops
before a step (it died before its draw) sent nothing of that step: its values stop there, and any
record of a later one is unexplained.

The models before every step come out on the way: the clip check (`clip`) needs them, as a logged
gradient holds the regulariser's λθ beside its clipped data part.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.muffliato.trajectories import (
    compare_with_logs,
    inputs_needed,
    recompute_trajectories,
)
from coordinator_tools.audit.records import PrivateSection
from coordinator_tools.audit.trajectories import (
    TRAJECTORY_RTOL,
    PayloadComparison,
    TrajectoryCheck,
    missing_inputs,
)
from node.codec import from_tensor
from node.protocols.muffliato_gd import NOISE_PURPOSE


@dataclass(frozen=True)
class StepReplay:
    """The payloads checked, and θ_v^s for every node v and step s whose model the recomputation reached."""

    trajectories: TrajectoryCheck
    models: Mapping[tuple[int, int], np.ndarray]


class StepOpener:
    """Opens each node's steps from its private log, keeping the model each step started from."""

    def __init__(self, private: PrivateSection, learning_rate: float,
                 noise: Mapping[int, Mapping[int, np.ndarray]] | None = None) -> None:
        self._gradients = private.inputs
        self._draws = step_draws(private) if noise is None else noise
        self._learning_rate = learning_rate
        self.models: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, node: int, step: int, model: np.ndarray) -> np.ndarray | None:
        """θ − η (g + z) of the node's step, or None when its private log holds no gradient and draw for it."""
        self.models[node, step] = model
        gradients, draw = self._gradients[node], self._draws[node].get(step)
        if step >= len(gradients) or draw is None:
            return None
        return model - self._learning_rate * (gradients[step] + draw)


def step_draws(private: PrivateSection) -> dict[int, dict[int, np.ndarray]]:
    """Every node's noise of every step: its logged gradient draw."""
    return {node: {draw.step: from_tensor(draw.value) for draw in draws if draw.purpose == NOISE_PURPOSE}
            for node, draws in private.draws.items()}


def replay_steps(replay: Replay, *, rtol: float = TRAJECTORY_RTOL,
                 noise: Mapping[int, Mapping[int, np.ndarray]] | None = None) -> StepReplay:
    """Recompute every node's models from its gradients and draws; compare them with every logged payload.

    `noise` gives each node's whole noise per step where a protocol adds more than its gradient draw (DECOR's
    pairwise terms); by default the gradient draws (`step_draws`).
    """
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    private, transcript = replay.private, replay.realized
    failed = missing_inputs(inputs_needed(transcript), set(private.inputs))
    if failed is not None:
        return StepReplay(failed, {})
    opener = StepOpener(private, replay.topology.protocol.learning_rate, noise)
    initial = {node: opened for node in private.inputs
               if (opened := opener(node, 0, np.zeros(replay.topology.protocol.vector_length))) is not None}
    try:
        values = recompute_trajectories(transcript, initial, opener)
    except ValueError as exc:
        comparison = PayloadComparison(1.0, rtol)
        comparison.unexplained(-1, f"{exc}: no value is recomputed")
        return StepReplay(comparison.result(), opener.models)
    largest = max((float(np.max(np.abs(value), initial=0.0)) for trajectory in values.values()
                   for value in trajectory), default=0.0)
    comparison = PayloadComparison(largest, rtol)
    compare_with_logs(replay, values, comparison)
    return StepReplay(comparison.result(), opener.models)
