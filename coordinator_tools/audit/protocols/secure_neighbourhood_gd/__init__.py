"""Auditing secure-neighbourhood learning (`node.protocols.secure_neighbourhood_gd`): Muffliato-GD's audit, masked.

The logs are Muffliato-GD's (round t·K + k is gossip round k of step t) after the key shares that
open a run, set aside as secure-neighbourhood averaging's are (`key_shares`), except
that every value is addressed: j sends each neighbour v its own masked value z_{j→v}. So the
rebuild, the unrolled schedule (`muffliato_gd.unrolled`) and the utility block are Muffliato-GD's;
what differs:

* `exact`: reachable-step composition (`decor_gd.steps` with no pairwise column: each reached step
  of u counts 1) with the masks **given to the observer**. Every mask is drawn from a secret and is
  independent of the data, so an observer that also knew every mask could compute whatever the real
  observer computes: its loss is an upper bound on the real one, under every threat model (curious
  node, coalition, eavesdropper). The bound counts none of the masks' protection; the masks add
  privacy only where an observer would otherwise see a neighbour's model on its own, and the report
  says so rather than claim it (`THEOREM`, `CONDITIONS`).
* `paper`: none. Koskela & Kulkarni's closed form (arXiv 2505.19969) is for gossip *averaging* with
  node noise (its view is a fixed linear map of the inputs plus Gaussian noise); a learning run's
  steps are gradients at models that depend on earlier noise, outside that form. The column is
  empty and its note says why.
* the trajectory check recomputes every model and every masked value from the private logs
  (gradients, draws, masks) along the realized rows (`masked_replay`), and holds every logged
  payload against them; the clip check is Muffliato-GD's on the models it recomputes.

No linearized column and no canary model: the payloads are checked from the private logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.decor_gd import linear_model, own_draws
from coordinator_tools.audit.protocols.decor_gd.steps import CONDITIONS as STEP_CONDITIONS
from coordinator_tools.audit.protocols.decor_gd.steps import step_geometry
from coordinator_tools.audit.protocols.key_shares import KeySharesAside
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.protocols.muffliato_gd import MuffliatoGDAuditor, learning_block
from coordinator_tools.audit.protocols.muffliato_gd.accountant import learning_schedule
from coordinator_tools.audit.protocols.muffliato_gd.trajectories import StepReplay
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import unroll
from coordinator_tools.audit.protocols.secure_neighbourhood_gd.masked_replay import masked_replay
from coordinator_tools.audit.reachable import reachable_geometry
from netdp.v1 import viewlog_pb2
from node.protocols.muffliato_gd import NOISE_PURPOSE
from node.protocols.secure_neighbourhood import co_neighbours
from node.protocols.secure_neighbourhood_gd import PROTOCOL_NAME, SecureNeighbourhoodGDParams
from node.topology import Topology

THEOREM = ("reachable-step composition (Mironov 2017 Prop. 1; Dong, Roth & Su 2022 Cor. 3.3) with every mask given "
           "to the observer: masks are data-independent, so the view with them is a post-processing-dominating view; "
           "mu^2 = (Delta/sigma)^2 x the number of u's steps that reach the view")
CONDITIONS = (
    STEP_CONDITIONS[0],
    "A2: fresh independent N(0, sigma^2) noise per node at every step, drawn independently of the data; every "
    "mask drawn from a pairwise secret, independent of the data (given to the observer, so its scale is not used)",
    STEP_CONDITIONS[2],
    "A4: the observer knows its own data and noise and, for the bound, every mask; a coalition the union of its "
    "members'; an eavesdropper sees every message",
)
EXACT_DEFINITION = f"a proven upper bound, {THEOREM}; under {'; '.join(CONDITIONS)}. The lower end is null"
PAPER_NONE = ("paper: none; Koskela & Kulkarni's closed form (arXiv 2505.19969) covers gossip averaging with node "
              "noise, not gradient steps at noise-dependent models (empty column)")
NO_ATTACK = ("attack: no canary or attack column for secure-neighbourhood-gd (the exact column is a bound, payloads "
             "are checked)")


def secure_gd_params(topology: Topology) -> SecureNeighbourhoodGDParams:
    """The topology's secure-neighbourhood learning parameters."""
    params = topology.protocol
    if not isinstance(params, SecureNeighbourhoodGDParams):
        raise TypeError(f"a {PROTOCOL_NAME} audit of a topology running {params.name!r}")  # type: ignore[attr-defined]
    return params


def planned_geometry(transcript: Transcript, threat_model: ThreatModel) -> np.ndarray:
    """Every pair's σ-free factor of the exact bound: the count of u's steps that reach v's (or the view's) values."""
    return step_geometry(unroll(learning_schedule(transcript)), [], 0.0, threat_model)


def account(transcript: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses of the run at the options' noise, Δ, order and δ: the exact bound under the threat model."""
    threat_model = options.get("threat_model", ThreatModel())
    for unused in ("attack_pairs", "attack_runs", "rng_seed"):
        options.pop(unused, None)  # type: ignore[misc]
    secure_gd_params(transcript.topology)
    run = unroll(learning_schedule(transcript))
    geometry = step_geometry(run, [], 0.0, threat_model)
    losses = account_model(linear_model(run, [], 0.0), np.full((run.n, run.n), np.nan),
                           geometry=reachable_geometry(geometry), releases=run.steps, notes=[PAPER_NONE, NO_ATTACK],
                           **options)
    losses.exact_is_bound = True
    losses.assumptions = {"exact": {"theorem": THEOREM, "conditions": list(CONDITIONS)}}
    losses.definitions.update({
        "exact": EXACT_DEFINITION,
        "ldp": "each of u's T noisy gradient steps seen directly, with its own noise only"})
    return losses


class SecureNeighbourhoodGDAuditor(KeySharesAside[Transcript], MuffliatoGDAuditor):
    """Secure-neighbourhood learning: Muffliato-GD's records after the key shares, one masked value per receiver."""

    name = PROTOCOL_NAME
    noise_purpose = NOISE_PURPOSE
    joint_views = True  # a coalition's members' views together (`decor_gd.steps`)
    eavesdropper_views = True

    def peers(self, topology: Topology, node: int) -> frozenset[int]:
        """Its neighbours, and the co-neighbours it agreed a secret with."""
        return frozenset(topology.neighbours[node]) | frozenset(co_neighbours(topology, node))

    def inputs_problem(self, inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        return super().inputs_problem(inputs, own_draws(draws))

    def account(self, run: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def planned_geometry(self, transcript: Transcript, threat_model: ThreatModel) -> np.ndarray:
        return planned_geometry(transcript, threat_model)

    def replay_steps(self, replay: Replay) -> StepReplay:
        """Every masked value and model recomputed (`masked_replay`)."""
        masked = masked_replay(replay)
        return StepReplay(masked.trajectories, masked.models)

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        params = secure_gd_params(replay.topology)
        return learning_block(params, params.gossip_rounds, mask_ratio=params.mask_ratio)

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel | None:
        return None


AUDITOR = SecureNeighbourhoodGDAuditor()  # registered by node.protocols.secure_neighbourhood_gd
