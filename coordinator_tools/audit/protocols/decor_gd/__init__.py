"""Auditing DECOR learning (`node.protocols.decor_gd`): Muffliato-GD's audit, the pairwise draws added.

The logs are Muffliato-GD's (round t·K + k is gossip round k of step t) after the key shares that
open a run, which the rebuild sets aside as DECOR averaging's does (`key_shares`). So
the replay, the unrolled schedule (`muffliato_gd.unrolled`), the utility block and the clip check
are Muffliato-GD's; what differs:

* `exact`: the joint-step composition (`steps`), a proven bound that reads every edge's draw of a step
  as a column at both of its ends (+1 at the lower, −1 at the higher), known to the observer where
  it holds the edge's secret. It is accounted under every threat model (curious node, coalition,
  eavesdropper).
* the linear model (`linear_model`): the unrolled rows on every (node, step) gradient, one noise
  column per independent draw and one per edge and step, held by both ends.
* the trajectory check recomputes every model with each step's whole noise: the node's draw plus
  its signed pairwise draws.

* `paper`: DECOR's Theorem 1 (SecLDP, `decor_accountant`) over the T steps, where its conditions hold:
  both noises every step (always, in decor-gd), one fixed graph, every node completing every step,
  no coalition. Outside them the column is empty and its note names the failed conditions; the
  exact column is computed under every threat model all the same.

* `empirical` (a run made with `--canaries`): Muffliato-GD's canary model (`muffliato_gd.accountant`) with
  this linear model, so each canary block's noise is the node's own draws and its signed pairwise draws,
  and an observer's score first subtracts the pairwise draws it holds, as the exact column does.

No linearized column: the payloads are checked from the private logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.decor import edges, every_node_to_the_end
from coordinator_tools.audit.protocols.decor_accountant import THEOREM as SECLDP_THEOREM
from coordinator_tools.audit.protocols.decor_accountant import Condition, SecLdp, secldp
from coordinator_tools.audit.protocols.decor_gd.steps import CONDITIONS, THEOREM, step_geometry
from coordinator_tools.audit.protocols.key_shares import KeySharesAside, rounds_only
from coordinator_tools.audit.protocols.muffliato.accountant import round_value
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.protocols.muffliato_gd import MuffliatoGDAuditor, learning_block
from coordinator_tools.audit.protocols.muffliato_gd.accountant import learning_schedule
from coordinator_tools.audit.protocols.muffliato_gd.trajectories import StepReplay, replay_steps, step_draws
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import UnrolledRun, unroll
from coordinator_tools.audit.reachable import reachable_geometry
from coordinator_tools.audit.records import PrivateSection
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.pairwise_secrets import edge_sign
from node.protocols.decor import PAIRWISE_PURPOSE, pairwise_step
from node.protocols.decor_gd import PROTOCOL_NAME, DecorGDParams
from node.protocols.muffliato_gd import NOISE_PURPOSE
from node.topology import FixedSchedule, Topology

EXACT_DEFINITION = f"a proven upper bound, {THEOREM}; under {'; '.join(CONDITIONS)}. The lower end is null"
NO_ATTACK = ("attack: no simulated attack column for decor-gd (the exact column is a bound, payloads are checked); "
             "a run made with --canaries gets the empirical column from its real canaries")


def linear_model(run: UnrolledRun, pairs: list[tuple[int, int]], ratio: float) -> LinearGaussianModel:
    """The run's rows on the inputs (one per node: the same shift every step), one noise column per (node, step)
    draw owned by the node and one per (edge, step) draw held by both ends, entering with the ends' signs."""
    steps = run.steps
    independent = run.linear_model()
    shared = np.stack([run.rows[:, run.column(i, s)] - run.rows[:, run.column(j, s)]
                       for s in range(steps) for i, j in pairs], axis=1) if pairs else np.zeros((len(run.rows), 0))
    holders = tuple((u,) for u in range(run.n) for _ in range(steps)) + tuple(pair for _ in range(steps)
                                                                             for pair in pairs)
    return LinearGaussianModel(
        n=run.n, inputs=independent.inputs, received=run.received, noise=np.hstack([run.rows, shared]),
        noise_owner=tuple(holder[0] for holder in holders), noise_holders=holders,
        noise_scale=np.concatenate([np.ones(run.rows.shape[1]), np.full(shared.shape[1], ratio)]))


def canary_model(transcript: Transcript) -> CanaryModel:
    """The run's canary coordinates as Muffliato-GD's (every step's contribution carries the node's canaries, the
    payload is γ times the unrolled row), on this linear model: the pairwise draws are noise columns held by both
    ends of their edge, so an observer knows those of its own edges."""
    params = decor_gd_params(transcript.topology)
    run = unroll(learning_schedule(transcript))
    model = linear_model(run, edges(transcript.topology), params.sigma_cor_ratio)
    labels = tuple((w, t * transcript.rounds_per_step + k) for t, k, w in run.messages)
    return CanaryModel(model, model.inputs, labels, round_value, scale=params.learning_rate)


def decor_gd_params(topology: Topology) -> DecorGDParams:
    """The topology's DECOR learning parameters."""
    params = topology.protocol
    if not isinstance(params, DecorGDParams):
        raise TypeError(f"a {PROTOCOL_NAME} audit of a topology running {params.name!r}")  # type: ignore[attr-defined]
    return params


def account(transcript: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses of the run at the options' noise, Δ, order and δ: the exact bound under the threat model."""
    threat_model = options.get("threat_model", ThreatModel())
    for unused in ("attack_pairs", "attack_runs", "rng_seed"):
        options.pop(unused, None)  # type: ignore[misc]
    params = decor_gd_params(transcript.topology)
    run = unroll(learning_schedule(transcript))
    pairs = edges(transcript.topology)
    geometry = step_geometry(run, pairs, params.sigma_cor_ratio, threat_model)
    theorem = secldp_run(transcript, threat_model)
    paper_note = f"paper: {SECLDP_THEOREM}" + ("" if theorem.covers else
                                               f"; it does not cover this run, so the paper columns are empty: "
                                               f"{theorem.reason}")
    losses = account_model(linear_model(run, pairs, params.sigma_cor_ratio), theorem.column(),
                           geometry=reachable_geometry(geometry), releases=run.steps,
                           notes=[paper_note, NO_ATTACK], **options)
    losses.exact_is_bound = True
    losses.assumptions = {"exact": {"theorem": THEOREM, "conditions": list(CONDITIONS)}}
    losses.definitions.update({
        "exact": EXACT_DEFINITION,
        "ldp": "each of u's T noisy gradient steps seen directly, with its independent noise only"})
    return losses


def secldp_run(transcript: Transcript, threat_model: ThreatModel) -> SecLdp:
    """DECOR's Theorem 1 on a decor-gd run: D-SGD drawing both noises every step, so the graph and completion decide."""
    params = decor_gd_params(transcript.topology)
    fixed = isinstance(transcript.topology.schedule, FixedSchedule)
    one_graph = Condition("one fixed graph", fixed, "every step on the topology's graph" if fixed
                          else "a graph drawn per step: Theorem 1 is stated for one graph")
    return secldp(transcript.topology, threat_model, steps=params.steps, ratio=params.sigma_cor_ratio,
                  conditions=(one_graph, every_node_to_the_end(transcript)))


def planned_geometry(transcript: Transcript, threat_model: ThreatModel) -> np.ndarray:
    """Every pair's σ-free factor of the exact bound on a planned transcript (calibration)."""
    params = decor_gd_params(transcript.topology)
    return step_geometry(unroll(learning_schedule(transcript)), edges(transcript.topology), params.sigma_cor_ratio,
                         threat_model)


def step_noise(topology: Topology, private: PrivateSection) -> dict[int, dict[int, np.ndarray]]:
    """Every node's whole noise of every step: its own draw plus Σ_j s_vj v_(vj), from its private log."""
    noise = step_draws(private)
    n = topology.n
    for node, draws in private.draws.items():
        for draw in draws:
            if draw.purpose != PAIRWISE_PURPOSE:
                continue
            step, peer = divmod(int(draw.step), n)
            if step in noise[node] and pairwise_step(step, peer, n) == draw.step:
                noise[node][step] = noise[node][step] + edge_sign(node, peer) * from_tensor(draw.value)
    return noise


class DecorGDAuditor(KeySharesAside[Transcript], MuffliatoGDAuditor):
    """DECOR learning: Muffliato-GD's records after the key shares, a pairwise draw per edge and step."""

    name = PROTOCOL_NAME
    noise_purpose = NOISE_PURPOSE
    joint_views = True  # a coalition holds every draw of its members' edges (`steps`)
    eavesdropper_views = True

    def inputs_problem(self, inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        return super().inputs_problem(inputs, own_draws(draws))

    def account(self, run: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def planned_geometry(self, transcript: Transcript, threat_model: ThreatModel) -> np.ndarray:
        return planned_geometry(transcript, threat_model)

    def replay_steps(self, replay: Replay) -> StepReplay:
        """Muffliato-GD's replay of the rounds, each step's noise its own draw plus its pairwise draws."""
        assert replay.private is not None
        rounds = replace(replay, logs=rounds_only(replay.logs))
        return replay_steps(rounds, noise=step_noise(replay.topology, replay.private))

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        params = decor_gd_params(replay.topology)
        return learning_block(params, params.gossip_rounds, sigma_cor_ratio=params.sigma_cor_ratio)

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel | None:
        return canary_model(run)


def own_draws(draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> tuple[viewlog_pb2.NoiseDraw, ...]:
    """A node's independent gradient draws, without its secrets and pairwise draws."""
    return tuple(draw for draw in draws if draw.purpose == NOISE_PURPOSE)


AUDITOR = DecorGDAuditor()  # registered by node.protocols.decor_gd
