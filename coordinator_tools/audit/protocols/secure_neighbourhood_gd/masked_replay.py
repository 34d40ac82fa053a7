"""Recompute every masked value and model of a secure-neighbourhood learning run from its private logs.

Node j's step s opens with θ_j^s − η (g_j^s + z_j^s) (θ^0 = 0, public; its logged clipped gradient and
draw of step s). In gossip round r it sends each neighbour v z_{j→v}^r = W_vj θ_j^r + Σ_k s_jk m^{(v)}_{jk,r},
each mask as j's private log holds it, and v mixes along its realized row: θ_v ← W'_vv θ_v + Σ_{j used}
z_{j→v}^r. A neighbour dropped for the round takes its masks' partners with it, so masks left in the
sum stay in the model, as they did on the nodes. Every payload sent, received or refused, and every
output, is held against the recomputed one; the models before each step come out for the clip check.

The replay is written from the protocol's definition, not from the node's code, so it is an
independent check of the nodes' arithmetic, and of the masks both ends logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.key_shares import rounds_only
from coordinator_tools.audit.protocols.muffliato_gd.trajectories import step_draws
from coordinator_tools.audit.trajectories import PayloadComparison, TrajectoryCheck
from node.codec import from_tensor
from node.pairwise_secrets import edge_sign
from node.protocols.secure_neighbourhood import MASK_PURPOSE, mask_step


@dataclass(frozen=True)
class MaskedReplay:
    """The payloads checked; every value z_{j→v}^r recomputed; θ_v^s before every step a node took."""

    trajectories: TrajectoryCheck
    values: Mapping[tuple[int, int, int], np.ndarray]  # (sender j, round r, receiver v)
    models: Mapping[tuple[int, int], np.ndarray]


def masked_replay(replay: Replay) -> MaskedReplay:
    """Recompute the run from the private logs (`replay.private`, required) and compare it with every log."""
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    topology, run, private = replay.topology, replay.realized, replay.private
    params = topology.protocol
    n, per_step = topology.n, params.gossip_rounds
    draws = step_draws(private)
    masks = {(node, int(draw.step)): from_tensor(draw.value) for node, logged in private.draws.items()
             for draw in logged if draw.purpose == MASK_PURPOSE}
    models = {v: np.zeros(params.vector_length) for v in range(n)}
    before: dict[tuple[int, int], np.ndarray] = {}
    values: dict[tuple[int, int, int], np.ndarray] = {}
    finals: dict[int, np.ndarray] = {}
    missing: list[str] = []
    for step in range(params.steps):
        for v in range(n):
            gradients, draw = private.inputs.get(v, []), draws.get(v, {}).get(step)
            if step < len(gradients) and draw is not None and run.completed_rounds(v) > step * per_step:
                before[v, step] = models[v]
                models[v] = models[v] - params.learning_rate * (gradients[step] + draw)
        for r in range(step * per_step, (step + 1) * per_step):
            running = [v for v in range(n) if run.completed_rounds(v) > r]
            for j in running:
                for v in topology.neighbours[j]:
                    value = topology.weight_row(v)[j] * models[j]
                    for k in topology.neighbours[v]:
                        mask = masks.get((j, mask_step(r, v, k, n))) if k != j else None
                        if k != j and mask is None:
                            missing.append(f"node {j}'s mask with node {k} for node {v} in round {r}")
                        elif mask is not None:
                            value = value + edge_sign(j, k) * mask
                    values[j, r, v] = value
            mixed = {}
            for v in running:
                row = run.realized_row(v, r)
                mixed[v] = row[v] * models[v] + sum((values[j, r, v] for j in row if j != v),
                                                    np.zeros_like(models[v]))
            models.update(mixed)
            finals.update({v: models[v] for v in running if r == run.rounds - 1})
    largest = max((float(np.max(np.abs(value), initial=0.0)) for value in values.values()), default=0.0)
    comparison = PayloadComparison(largest)
    for what in missing:
        comparison.unexplained(-1, f"the private logs hold no mask for {what}")
    for node, log in rounds_only(replay.logs).items():  # the key shares that open the run set aside
        logged = [((node, key.id.round, key.peer), sent.payload, "sent") for key, sent in log.sent.items()]
        logged += [((key.peer, key.id.round, node), payload, "received")
                   for key, payload in log.values_in_view().items()]
        for address, tensor, kind in logged:
            if address not in values:
                comparison.unexplained(node, f"{kind} record holds z_{address[0]}->{address[2]}^{address[1]}, "
                                             "which the run never computes")
            else:
                comparison.compare(node, tensor, values[address], f"{kind} record of z_{address[0]}->"
                                                                  f"{address[2]}^{address[1]}")
        if log.final_output is not None:
            if node in finals:
                comparison.compare(node, log.final_output.value, finals[node], f"final output of node {node}")
            else:
                comparison.unexplained(node, f"node {node}'s output, though it did not complete every round")
    return MaskedReplay(comparison.result(), values, before)
