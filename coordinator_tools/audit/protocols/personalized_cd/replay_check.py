"""Replaying personalized CD from the private logs: every broadcast model is update (6) of what its agent logged.

For every agent and every update t it logged (its `step_inputs` record of step t) the auditor takes
* its model before the update: zeros (public) at t = 0, else its own broadcast of update t − 1 as it
  logged it (the recomputed one when it logged none);
* the neighbour broadcasts the step names, by sender and sequence, as its view log received them (a
  neighbour it names none of counts with its public initial model, zeros);
* its clipped gradient (the private input of step t) and, in a private run, its Laplace draw of step t;
recomputes update (6) with `AgentProblem.update` and compares the result with every `sent` record of
the update's broadcast (sequence t + 1): the models the accountant sees are what the agent computed.

The update depends on the agent's data through m_i alone (c_i, λ_i = 1/m_i, α_i), which no log holds,
so the check reads the run's data folder (`--data`). Not the noise scale s_t = 2L₀/(ε_t m_i) of a private
run: that would take the agent's word for the very scale it must be checked against, and a
non-private run logs none. With the data the auditor also recomputes each step's clipped gradient at
the model before it, and checks that each draw's scale pays for no less than the step's logged ε:
s_t ε_t ≥ 2L₀/m_i (a node's sampler may widen it, never narrow it).

Keyed on the logged records: update t is the `step_inputs` of step t, its draw the `gradient` draw of
step t, its spend the `budget` record of step t + w, its broadcast sequence t + 1 + w, its gradient
the private input t + w (w = 1 when the run publishes a private warm start, else 0). The warm start
is release 0: its private input is the agent's local model (recomputed from the data), its
`warm_start` draw's scale pays for the budget record of step 0 at the local model's sensitivity,
broadcast #1 is their sum, and update 0 starts from it instead of zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from coordinator_tools.audit.protocols.personalized_cd.utility import agent_problems
from coordinator_tools.audit.records import Finding, MessageKey, NodeLog
from coordinator_tools.audit.trajectories import (
    TRAJECTORY_RTOL,
    PayloadComparison,
    TrajectoryCheck,
    missing_inputs,
)
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.personalized import AgentProblem
from node.protocols.personalized_cd import NOISE_PURPOSE, WARM_START_PURPOSE, PersonalizedCDParams

if TYPE_CHECKING:
    from coordinator_tools.audit.replay import Replay


def check_updates(replay: Replay, *, rtol: float = TRAJECTORY_RTOL) -> TrajectoryCheck:
    """Recompute every logged update of every agent from its private log and compare it with its broadcasts."""
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    if replay.data_dir is None:
        finding = Finding("error", "missing_data", None, "no update recomputed: m_i of every agent is in its data "
                                                         "only; audit with --data")
        return TrajectoryCheck(0, float("nan"), (finding,))
    updating = {agent for agent, log in replay.logs.items() if log.of_kind("step_inputs")}
    failed = missing_inputs(updating, set(replay.private.inputs))
    if failed is not None:
        return failed
    params: PersonalizedCDParams = replay.topology.protocol
    problems = agent_problems(replay.topology, replay.data_dir)
    comparison = PayloadComparison(_largest_model(replay.logs), rtol)
    for agent in sorted(updating):
        draws = {draw.step: draw for draw in replay.private.draws[agent] if draw.purpose == NOISE_PURPOSE}
        warm = [draw for draw in replay.private.draws[agent] if draw.purpose == WARM_START_PURPOSE]
        if params.warm_start_releases and not warm:
            comparison.unexplained(agent, f"node {agent} updated, but its warm start's draw is not logged")
            continue
        _replay_agent(replay.logs[agent], problems[agent], replay.private.inputs[agent],
                      draws if params.private else None, warm[0] if warm else None, comparison)
    return comparison.result()


def _replay_agent(log: NodeLog, problem: AgentProblem, inputs: np.ndarray,
                  draws: dict[int, viewlog_pb2.NoiseDraw] | None, warm: viewlog_pb2.NoiseDraw | None,
                  comparison: PayloadComparison) -> None:
    """One agent's updates, in log order, into `comparison` (`draws` by step; None: non-private CD; `warm`: the
    warm start's draw, whose local model is inputs[0], when the run publishes one)."""
    agent, initial = log.node, np.zeros(inputs.shape[1])
    first = int(warm is not None)  # update t is release t + first
    spends = {int(record.step) - first: float(record.epsilon) for record in log.of_kind("budget")}
    broadcasts = _broadcasts(log)
    start = initial if warm is None else _replay_warm_start(agent, problem, inputs[0], warm, spends.get(-1),
                                                            broadcasts, comparison)
    gradients = inputs[first:]
    models: dict[int, np.ndarray] = {}  # update -> the model it produced, as logged (or recomputed)
    for record in log.of_kind("step_inputs"):
        step = int(record.step)
        where = f"node {agent}'s update {step}"
        logged = broadcasts.pop(step + 1 + first, [])
        previous = start if step == 0 else models.get(step - 1)
        if step >= len(gradients) or (draws is not None and step not in draws) or previous is None:
            if logged:  # a step cut short (a crash before its draw) released nothing: only a broadcast needs it all
                comparison.unexplained(agent, f"{where} was broadcast, but its gradient, draw or previous model "
                                              "is not logged")
            continue
        used, unheard = _used_models(record, log, problem, initial)
        if unheard:
            comparison.unexplained(agent, f"{where} used {unheard[0]}, which its view log did not receive")
            continue
        comparison.compare(agent, gradients[step], problem.gradient(previous)[0], f"{where}'s logged gradient")
        noise = initial
        if draws is not None:
            noise = from_tensor(draws[step].value)
            _check_scale(agent, where, draws[step].scale, spends.get(step), problem.sensitivity, comparison)
        recomputed = problem.update(previous, used, gradients[step] + noise)
        for tensor in logged:
            comparison.compare(agent, tensor, recomputed, f"{where}'s broadcast #{step + 1 + first}")
        models[step] = from_tensor(logged[0]) if logged else recomputed
    for sequence in sorted(broadcasts):
        comparison.unexplained(agent, f"node {agent}'s broadcast #{sequence} follows no logged update")


def _replay_warm_start(agent: int, problem: AgentProblem, local: np.ndarray, draw: viewlog_pb2.NoiseDraw,
                       epsilon: float | None, broadcasts: dict[int, list[viewlog_pb2.Tensor]],
                       comparison: PayloadComparison) -> np.ndarray:
    """The warm start's local model, noise scale and broadcast #1 checked; the model the agent's updates start from."""
    where = f"node {agent}'s warm start"
    comparison.compare(agent, local, problem.local_model(), f"{where}'s local model")
    _check_scale(agent, where, draw.scale, epsilon, problem.warm_start_sensitivity, comparison)
    released = local + from_tensor(draw.value)
    logged = broadcasts.pop(1, [])
    for tensor in logged:
        comparison.compare(agent, tensor, released, f"{where}'s broadcast #1")
    return from_tensor(logged[0]) if logged else released


def _broadcasts(log: NodeLog) -> dict[int, list[viewlog_pb2.Tensor]]:
    """Every sent model payload of the agent by broadcast sequence (one per neighbour tried)."""
    broadcasts: dict[int, list[viewlog_pb2.Tensor]] = {}
    for key, sent in log.sent.items():
        broadcasts.setdefault(key.id.sequence, []).append(sent.payload)
    return broadcasts


def _used_models(record: viewlog_pb2.StepInputs, log: NodeLog, problem: AgentProblem,
                 initial: np.ndarray) -> tuple[dict[int, np.ndarray], list[str]]:
    """Every neighbour's model the step used (its initial one when the step names none of its broadcasts),
    and the named broadcasts the agent's view never received."""
    used: dict[int, np.ndarray] = {}
    unheard = []
    for ref in record.inputs:
        received = log.received.get(MessageKey.of(ref, ref.peer))
        if received is None:
            unheard.append(MessageKey.of(ref, ref.peer).describe(ref.peer, log.node))
        else:
            used[ref.peer] = from_tensor(received.payload)
    return {peer: used.get(peer, initial) for peer in problem.weights}, unheard


def _check_scale(agent: int, where: str, scale: float, epsilon: float | None, sensitivity: float,
                 comparison: PayloadComparison) -> None:
    """A draw's Laplace scale must be at least the one its logged ε asks at its sensitivity (an update's: 2L₀/m_i)."""
    if epsilon is not None and scale * epsilon < sensitivity * (1.0 - comparison.rtol):
        comparison.mismatches.append(Finding(
            "error", "noise_below_spend", agent,
            f"{where} drew Laplace noise of scale {scale:.6g}, less than its sensitivity over eps = "
            f"{sensitivity / epsilon:.6g} for its logged eps {epsilon:g}"))


def _largest_model(logs: Mapping[int, NodeLog]) -> float:
    """The largest |coordinate| of any broadcast model: deviations are measured relative to it."""
    return max((float(np.max(np.abs(from_tensor(sent.payload)), initial=0.0))
                for log in logs.values() for sent in log.sent.values()), default=0.0)
