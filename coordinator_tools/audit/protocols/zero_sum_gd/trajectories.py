"""Recompute every value a zero-sum learning node sent from its private log, and compare it with every log.

Node a's step s: θ_a^0 = 0; y_{a→j}^s = θ_a^s − η (g_a^s + Z_{a→j}^s) with g_a^s its logged step gradient and
Z_{a→j}^s = Σ_k C[j][k] Y_{a→k}^s from its logged draws (`zero_sum_coefficients`, the node's own); then
θ_a^{s+1} = Σ_w P_aw (kept value if w = a, else the value it logged as received from w), P the realized row.
Every value sent, received or refused, and every output, is held against the recomputed one (a received
value against what its sender's private log says it sent), so a node that sends anything else fails the
audit; the zero-sum invariant itself is the node's coefficients, which the audit derives from the
published mixing row.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.protocols.muffliato_gd.trajectories import StepReplay
from coordinator_tools.audit.records import NodeLog, PrivateSection
from coordinator_tools.audit.trajectories import PayloadComparison, missing_inputs
from node.codec import from_tensor
from node.message import GOSSIP
from node.protocols.zero_sum import SHARE_PURPOSE, share_step, zero_sum_coefficients
from node.protocols.zero_sum_gd import ZeroSumGDParams

Value = tuple[int, int, int]  # (sender, step, receiver)


def step_shares(private: PrivateSection, row: Mapping[int, float], node: int, step: int,
                n: int) -> dict[int, np.ndarray] | None:
    """Z_{a→j}^s for every j of the node's closed neighbourhood from its logged draws, or None if it drew none."""
    draws = {int(d.step): from_tensor(d.value) for d in private.draws.get(node, ()) if d.purpose == SHARE_PURPOSE}
    wanted = {k: share_step(step, k, n) for k in row}
    if any(index not in draws for index in wanted.values()):
        return None
    return {j: sum((weight * draws[wanted[k]] for k, weight in coefficients.items()), np.zeros_like(draws[wanted[j]]))
            for j, coefficients in zero_sum_coefficients(row).items()}


def received_payloads(log: NodeLog) -> dict[tuple[int, int], np.ndarray]:
    """(sender, step) → the value the node logged as reaching it."""
    return {(key.peer, key.id.round): from_tensor(payload) for key, payload in log.values_in_view().items()
            if key.kind == GOSSIP and key.peer is not None}


def recompute(run: Transcript, params: ZeroSumGDParams, private: PrivateSection,
              logs: Mapping[int, NodeLog]) -> tuple[dict[Value, np.ndarray], dict[tuple[int, int], np.ndarray]]:
    """Every value each node with a private log sent, and the model it started every step from."""
    sent: dict[Value, np.ndarray] = {}
    models: dict[tuple[int, int], np.ndarray] = {}
    eta = params.learning_rate
    for node, gradients in sorted(private.inputs.items()):
        row = run.topology.weight_row(node)
        heard = received_payloads(logs[node]) if node in logs else {}
        model = np.zeros(params.vector_length)
        for step, gradient in enumerate(gradients):
            models[node, step] = model
            shares = step_shares(private, row, node, step, run.n)
            if shares is None:
                break
            values = {j: model - eta * (gradient + share) for j, share in shares.items()}
            sent.update({(node, step, j): value for j, value in values.items() if j != node})
            if step >= run.completed_rounds(node):
                break
            model = sum((weight * (values[node] if w == node else heard[w, step])
                         for w, weight in run.realized_row(node, step).items()), np.zeros(params.vector_length))
            models[node, step + 1] = model
    return sent, models


def replay_steps(replay: Replay[Transcript]) -> StepReplay:
    """Recompute every node's values; compare them with every logged payload sent, received or refused."""
    private, run = replay.private, replay.realized
    assert private is not None
    params = run.topology.protocol
    assert isinstance(params, ZeroSumGDParams)
    failed = missing_inputs(set(range(run.n)), set(private.inputs))
    if failed is not None:
        return StepReplay(failed, {})
    sent, models = recompute(run, params, private, replay.logs)
    scale = max((float(np.max(np.abs(value))) for value in sent.values()), default=1.0)
    comparison = PayloadComparison(scale or 1.0)
    for node, log in sorted(replay.logs.items()):
        for key, record in log.sent.items():
            if key.kind == GOSSIP and key.peer is not None:
                check(comparison, sent, (node, key.id.round, key.peer), record.payload, f"sent record of node {node}")
        for (sender, step), payload in received_payloads(log).items():
            check(comparison, sent, (sender, step, node), payload, f"received by {node} record of node {sender}")
        output = log.final_output
        if output is not None:
            final = models.get((node, output.rounds_completed))
            if final is None:
                comparison.unexplained(node, f"node {node}'s output after {output.rounds_completed} steps")
            else:
                comparison.compare(node, output.value, final, f"node {node}'s output")
    return StepReplay(comparison.result(), models)


def check(comparison: PayloadComparison, sent: Mapping[Value, np.ndarray], value: Value, logged: object,
          what: str) -> None:
    """One logged value against its recomputation, or unexplained if no node's private log computes it."""
    tensor = logged if isinstance(logged, np.ndarray) else from_tensor(logged)  # type: ignore[arg-type]
    if value not in sent:
        comparison.unexplained(value[0], f"{what}'s step-{value[1]} value")
    else:
        comparison.compare(value[0], tensor, sent[value], f"{what}'s step-{value[1]} value")
