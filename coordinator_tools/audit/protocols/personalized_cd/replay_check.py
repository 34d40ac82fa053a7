"""Replaying personalized CD from the private logs: every broadcast model is update (6) of what its agent logged.

For every agent and every update t it logged (its `step_inputs` record of step t) the auditor takes
* its model before the update: the one the agent held, its last broadcast as it logged it (zeros,
  public, before any), or its last recomputed update for an agent without neighbours, which
  broadcasts nothing;
* the neighbour broadcasts the step names, by sender and sequence, as its view log received them (a
  neighbour it names none of counts with its public initial model, zeros);
* its clipped gradient (the private input of step t) and, in a private run, its Laplace draw of step t;
recomputes update (6) with `AgentProblem.update` and compares the result with every `sent` record of
the update's broadcast (sequence t + 1): the models the accountant sees are what the agent computed.

A release whose broadcast is not logged was cut short by a crash: the agent died after logging its
inputs (and paying for it), before its `sent` records, and a restarted agent (`--resume`) goes on
from its last logged broadcast, not from the model it lost (`node.agent_progress`). So the model an
update starts from is the last one logged before it, not update t − 1's. A release cut short logged
its private input if the crash came after it: one with a draw did, one without may have. The private
inputs (no step of their own) go to the releases in order, so the auditor tells which of those logged
theirs from the count: none of them, or all of them (one crash, or several at the same point); a
private log that fits neither is named, not guessed.

In an audit run (`canaries`) every vector has p + M coordinates: the logged input of an update is its
clipped gradient followed by its canaries, so the recomputed gradient is followed by the signs its
first update's input carries at magnitude L₀/m_i (half its sensitivity), the same at every update;
the warm start's input carries zeros there; update (6) is recomputed on all p + M coordinates.

The update depends on the agent's data through m_i alone (c_i, λ_i = 1/m_i, α_i), which no log holds,
so the check reads the run's data folder (`--data`). Not the noise scale s_t = 2L₀/(ε_t m_i) of a private
run: that would take the agent's word for the very scale it must be checked against, and a
non-private run logs none. With the data the auditor also recomputes each step's clipped gradient at
the model before it, and checks that each draw's scale pays for no less than the step's logged ε:
s_t ε_t ≥ 2L₀/m_i (a node's sampler may widen it, never narrow it).

Keyed on the logged records: update t is the `step_inputs` of step t, its draw the `gradient` draw of
step t, its spend the `budget` record of step t + w, its broadcast sequence t + 1 + w (w = 1 when the
run publishes a private warm start, else 0). The warm start is release 0: its private input is the
agent's local model (recomputed from the data), its `warm_start` draw's scale pays for the budget
record of step 0 at the local model's sensitivity, broadcast #1 is their sum, and update 0 starts
from it instead of zeros (from zeros when a crash cut it short).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.personalized_cd.utility import agent_problems
from coordinator_tools.audit.records import Finding, MessageKey, NodeLog
from coordinator_tools.audit.trajectories import (
    TRAJECTORY_RTOL,
    PayloadComparison,
    TrajectoryCheck,
    missing_inputs,
)
from netdp.v1 import viewlog_pb2
from node.canaries import Canaries
from node.codec import from_tensor
from node.personalized import AgentProblem
from node.protocols.personalized_cd import NOISE_PURPOSE, WARM_START_PURPOSE, PersonalizedCDParams


@dataclass
class Release:
    """One release an agent logged, its warm start (`step` None) or update `step`, and what its logs hold of it."""

    step: int | None
    sequence: int  # of its broadcast
    inputs: viewlog_pb2.StepInputs | None  # an update's public record of the neighbour broadcasts it used
    draw: viewlog_pb2.NoiseDraw | None
    epsilon: float | None  # its logged spend
    broadcasts: list[viewlog_pb2.Tensor]  # every `sent` payload of its sequence; none: a crash cut it short
    noisy: bool  # whether the run draws noise for it
    input_index: int | None = None  # its private input, once assigned

    @property
    def where(self) -> str:
        return "warm start" if self.step is None else f"update {self.step}"

    @property
    def surely_input(self) -> bool:
        """Whether it logged its private input for sure: its draw or its broadcast came after it."""
        return self.draw is not None or bool(self.broadcasts)


def check_updates(replay: Replay, *, rtol: float = TRAJECTORY_RTOL) -> TrajectoryCheck:
    """Recompute every logged update of every agent from its private log and compare it with its broadcasts."""
    if replay.private is None:
        raise ValueError("replay was made without private logs; pass with_private_logs=True")
    if replay.data_dir is None:
        finding = Finding("error", "missing_data", None, "no update recomputed: m_i of every agent is in its data "
                                                         "only; audit with --data")
        return TrajectoryCheck(0, float("nan"), (finding,))
    updating = {agent for agent, log in replay.logs.items() if log.of_kind("step_inputs") or log.sent}
    failed = missing_inputs(updating, set(replay.private.inputs))
    if failed is not None:
        return failed
    params: PersonalizedCDParams = replay.topology.protocol
    problems = agent_problems(replay.topology, replay.data_dir)
    comparison = PayloadComparison(_largest_model(replay.logs), rtol)
    for agent in sorted(updating):
        log, inputs = replay.logs[agent], replay.private.inputs[agent]
        releases = _releases(log, replay.private.draws[agent], params)
        if _assign_inputs(agent, releases, len(inputs), comparison):
            _replay_agent(log, releases, problems[agent], inputs, comparison)
        for sequence in sorted(_broadcasts(log).keys() - {release.sequence for release in releases}):
            comparison.unexplained(agent, f"node {agent}'s broadcast #{sequence} follows no logged update")
    return comparison.result()


def _releases(log: NodeLog, draws: tuple[viewlog_pb2.NoiseDraw, ...], params: PersonalizedCDParams) -> list[Release]:
    """The agent's releases in log order: its warm start (when published, and paid for or logged), then its updates."""
    first = params.warm_start_releases
    spends = {int(record.step): float(record.epsilon) for record in log.of_kind("budget")}
    broadcasts = _broadcasts(log)
    gradient_draws = {draw.step: draw for draw in draws if draw.purpose == NOISE_PURPOSE}
    warm = next((draw for draw in draws if draw.purpose == WARM_START_PURPOSE), None)
    releases = []
    if first and (0 in spends or warm is not None or 1 in broadcasts):
        releases.append(Release(None, 1, None, warm, spends.get(0), broadcasts.get(1, []), True))
    for record in log.of_kind("step_inputs"):
        step = int(record.step)
        releases.append(Release(step, step + 1 + first, record, gradient_draws.get(step), spends.get(step + first),
                                broadcasts.get(step + 1 + first, []), params.private))
    return releases


def _assign_inputs(agent: int, releases: list[Release], inputs: int, comparison: PayloadComparison) -> bool:
    """Each release's private input, in order: every one that surely logged one, and the others (cut short before
    their draw) all or none, as the count says; False, with a finding, when the count says neither."""
    cut_short = sum(not release.surely_input for release in releases)
    extra = inputs - (len(releases) - cut_short)
    if extra not in (0, cut_short):
        comparison.unexplained(agent, f"node {agent}'s private log holds {inputs} inputs for {len(releases)} releases, "
                                      f"{cut_short} of them cut short before their draw: the count cannot tell "
                                      "which of those logged theirs")
        return False
    index = 0
    for release in releases:
        if release.surely_input or extra:
            release.input_index, index = index, index + 1
    return True


def _replay_agent(log: NodeLog, releases: list[Release], problem: AgentProblem, inputs: np.ndarray,
                  comparison: PayloadComparison) -> None:
    """One agent's releases, in log order, into `comparison`. The model it holds is its last logged broadcast (a
    release cut short changes nothing: the agent resumed from that broadcast), or for an agent without
    neighbours, which broadcasts nothing, its last recomputed update."""
    agent, initial, dimension = log.node, np.zeros(inputs.shape[1]), problem.data.x.shape[1]
    held = initial
    gradients = [inputs[release.input_index] for release in releases
                 if release.step is not None and release.input_index is not None]
    canaries = Canaries(np.sign(gradients[0][dimension:]) if gradients else np.zeros(0))
    for release in releases:
        where = f"node {agent}'s {release.where}"
        private_input = None if release.input_index is None else inputs[release.input_index]
        if release.step is None:
            recomputed = _replay_warm_start(agent, where, problem, private_input, release, comparison)
        else:
            recomputed = _replay_update(where, log, problem, canaries, held, private_input, release, comparison)
        if release.broadcasts and recomputed is None:
            comparison.unexplained(agent, f"{where} was broadcast, but its private input or draw is not logged")
        elif recomputed is not None:
            for tensor in release.broadcasts:
                comparison.compare(agent, tensor, recomputed, f"{where}'s broadcast #{release.sequence}")
        if release.broadcasts:
            held = from_tensor(release.broadcasts[0])
        elif not problem.weights and recomputed is not None:
            held = recomputed


def _replay_update(where: str, log: NodeLog, problem: AgentProblem, canaries: Canaries, held: np.ndarray,
                   gradient: np.ndarray | None, release: Release, comparison: PayloadComparison) -> np.ndarray | None:
    """Update (6) from the held model; None when its gradient or draw is not logged (a crash cut it short). The
    recomputed gradient is the data coordinates' followed by the agent's canaries (an audit run)."""
    agent, dimension = log.node, problem.data.x.shape[1]
    if gradient is not None:
        recomputed = canaries.planted(problem.gradient(held[:dimension])[0], problem.sensitivity)
        comparison.compare(agent, gradient, recomputed, f"{where}'s logged gradient")
    if release.draw is not None:
        _check_scale(agent, where, release.draw.scale, release.epsilon, problem.sensitivity, comparison)
    if gradient is None or (release.noisy and release.draw is None):
        return None
    used, unheard = _used_models(release.inputs, log, problem, np.zeros_like(held))
    if unheard:
        comparison.unexplained(agent, f"{where} used {unheard[0]}, which its view log did not receive")
        return None
    noise = 0.0 if release.draw is None else from_tensor(release.draw.value)
    return problem.update(held, used, gradient + noise)


def _replay_warm_start(agent: int, where: str, problem: AgentProblem, local: np.ndarray | None, release: Release,
                       comparison: PayloadComparison) -> np.ndarray | None:
    """The warm start's local model and noise scale checked; its release, or None when its input or draw is not
    logged (a crash cut it short, and the agent's updates start from zeros)."""
    if local is not None:
        padded = np.zeros(local.shape)  # an audit run's canary coordinates: zeros, the warm start plants no canaries
        padded[: problem.data.x.shape[1]] = problem.local_model()
        comparison.compare(agent, local, padded, f"{where}'s local model")
    if release.draw is None or local is None:
        return None
    _check_scale(agent, where, release.draw.scale, release.epsilon, problem.warm_start_sensitivity, comparison)
    return local + from_tensor(release.draw.value)


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
