"""Auditing zero-sum learning (`node.protocols.zero_sum_gd`): Muffliato-GD's records, zero-sum averaging's values.

The logs are synchronous gossip logs with one round per step and a value per receiver, as zero-sum
averaging's; the rebuild (realized mixing, drop-outs), the utility block (test metric per step against the
central and local-DP baselines) and the clip check are Muffliato-GD's. What differs:

* `exact`: hidden-state share composition (`steps`), a proven bound under every threat model (curious
  node, coalition, eavesdropper): each step's values of u that reach the view's causal closure are one
  Gaussian release, through their zero-sum shares, of u's hidden model, whose sensitivity grows with the
  steps since no fresh noise of u's own ever covers it.
* `paper`: none. Zip-DL's Theorem 5.12, which netdp implements for zero-sum averaging, sums each value's
  marginal loss for a fixed input; a learning run's values carry gradients taken at models that hold the
  hidden state, which that sum does not account, so no paper column is given for this case.
* the linear model is zero-sum averaging's rows on the same realized run (each value's noise is −η times
  the averaging value's): it names the views; the exact factor is the theorem's, not its projection.
* the trajectory check recomputes every value sent, received or refused from the private logs (`trajectories`).

No canary column: the exact column is a bound and the payloads are checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.empirical import CanaryModel, PlantedCanaries
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.protocols.muffliato_gd import MuffliatoGDAuditor, learning_block
from coordinator_tools.audit.protocols.muffliato_gd.trajectories import StepReplay
from coordinator_tools.audit.protocols.zero_sum import ZeroSumAuditor
from coordinator_tools.audit.protocols.zero_sum_gd.steps import CONDITIONS, THEOREM, share_geometry
from coordinator_tools.audit.protocols.zero_sum_gd.trajectories import replay_steps
from coordinator_tools.audit.reachable import reachable_geometry
from netdp.v1 import viewlog_pb2
from node.protocols.zero_sum_gd import PROTOCOL_NAME, ZeroSumGDParams
from node.topology import Topology

EXACT_DEFINITION = f"a proven upper bound, {THEOREM}; under {'; '.join(CONDITIONS)}. The lower end is null"
PAPER_NOTE = ("paper: none for learning; Zip-DL's Theorem 5.12 (zero-sum averaging's paper column) sums each value's "
              "marginal loss for a fixed input, and a learning run's values carry gradients at models holding a hidden "
              "state it does not account")
NO_ATTACK = "attack: no canary or attack column for zero-sum-gd (the exact column is a bound, payloads are checked)"
VALUE_ROWS = ZeroSumAuditor()  # zero-sum averaging's rows: every value's share noise on the realized run


def zero_sum_gd_params(topology: Topology) -> ZeroSumGDParams:
    """The topology's zero-sum learning parameters."""
    params = topology.protocol
    if not isinstance(params, ZeroSumGDParams):
        raise TypeError(f"a {PROTOCOL_NAME} audit of a topology running {params.name!r}")  # type: ignore[attr-defined]
    return params


def account(run: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses at the options' noise, Δ, order and δ: the exact bound under the threat model."""
    threat_model = options.get("threat_model", ThreatModel())
    for unused in ("attack_pairs", "attack_runs", "rng_seed"):
        options.pop(unused, None)  # type: ignore[misc]
    zero_sum_gd_params(run.topology)
    losses = account_model(VALUE_ROWS.linear_model(run), np.full((run.n, run.n), np.nan),
                           geometry=reachable_geometry(share_geometry(run, threat_model)), releases=releases(run),
                           notes=[PAPER_NOTE, NO_ATTACK], **options)
    losses.exact_is_bound = True
    losses.assumptions = {"exact": {"theorem": THEOREM, "conditions": list(CONDITIONS)}}
    losses.definitions.update({
        "exact": EXACT_DEFINITION,
        "ldp": "every value u sent seen, its bound by the same theorem (releases at sigma per source): no view "
               "reveals more"})
    return losses


def releases(run: Transcript) -> np.ndarray:
    """Per source, what all its values reveal in releases at σ (the eavesdropper's factor): the local-DP baseline.

    A node adds no noise of its own, so "its T steps each released at σ" would not bound what its values give
    away; every view is in the closure of all values, so none exceeds this.
    """
    every = share_geometry(run, ThreatModel(eavesdropper=True))
    released: np.ndarray = np.nanmax(every, axis=1)
    return released


class ZeroSumGDAuditor(MuffliatoGDAuditor):
    """Zip-DL learning: one round per step, a value per receiver, zero-sum shares drawn per closed neighbour."""

    name = PROTOCOL_NAME
    joint_views = True  # a coalition knows every draw of its members (`steps`)
    eavesdropper_views = True

    def private_problem(self, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """Every draw a Gaussian share draw, each (step, member) once."""
        return VALUE_ROWS.private_problem(draws)

    def inputs_problem(self, inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
        """None: a step's draws are one per member of the closed neighbourhood, which the trajectory check matches
        to each logged gradient (a step without its draws computes no value, so any value logged for it fails)."""
        return None

    def account(self, run: Transcript, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
        return account(run, **options)

    def planned_geometry(self, transcript: Transcript, threat_model: ThreatModel) -> np.ndarray:
        return share_geometry(transcript, threat_model)

    def replay_steps(self, replay: Replay) -> StepReplay:
        return replay_steps(replay)

    def report_extras(self, replay: Replay, losses: PairwiseLosses,
                      accounting: Mapping[str, Any]) -> dict[str, object]:
        return learning_block(zero_sum_gd_params(replay.topology), gossip_rounds=1)

    def canary_model(self, run: Transcript, planted: PlantedCanaries) -> CanaryModel | None:
        return None


AUDITOR = ZeroSumGDAuditor()  # registered by node.protocols.zero_sum_gd
