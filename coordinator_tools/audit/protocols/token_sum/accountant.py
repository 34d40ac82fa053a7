"""Account a token summation: every column per pair (u → v) on its (realized or planned) path.

* exact: the linear-Gaussian core on the run's model (`model`): the realized path, every
  value v saw, every noise draw its own column (`core.gaussian_geometry`, a float interval);
* paper: PAbD Thm 1 or Thm 3 (`paper`), one ε' for every pair, no RDP;
* ldp: each of u's contributions seen directly, each a Gaussian release at σ (the LDP
  protocol the paper compares with): the ring's K, the walk's realized visits of u;
  central: a trusted aggregator releasing the sum with everyone's noise, once per mean visit;
* model attack: the distinguishing attack on the same model, as for the averaging protocols.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

import numpy as np

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.checks import RTOL
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.token_sum.model import linear_model
from coordinator_tools.audit.protocols.token_sum.paper import PaperBound, paper_bound
from coordinator_tools.audit.protocols.token_sum.run import TokenRun
from node.protocols import walk_sum

NOTES = (
    "paper: the theorem's (eps', delta) network-DP guarantee, the same eps' for every pair at the report's delta "
    "(delta split between the theorem's terms to make eps' smallest, see paper.split), Perturb's per-visit "
    "(eps, delta) read off the exact Gaussian privacy profile at sigma and Delta; the theorem states no RDP, so "
    "paper rdp is null and paper undercounts is judged in eps",
    "exact (realized path): the linear-Gaussian view of every token value the observer received (the sum at its "
    "visits, the result), conditioned on the path that ran; one input column per node (counted once per "
    "contribution) and one column per noise draw at its public std, owned by the node that drew it",
    "ldp: every contribution of the source seen directly, each a Gaussian release at sigma (ring: K; walk: the "
    "source's realized visits); central: the sum with everyone's noise, released once per mean visit",
)
# One line per column for the report page, each saying what its loss is given.
DEFINITIONS = {
    "paper": "the theorem's (eps', delta) network-DP guarantee (PAbD Thm 1 on the ring; Thm 3 on the walk, ex ante "
             "over the walk's path), the same eps' for every pair; no RDP",
    "ldp": "every contribution of the source seen directly, each a Gaussian release at sigma",
}
EXACT_GIVEN = "the realized path"
RING_EXACT = ("given the ring's path, which is public: the linear-Gaussian view of every token value the observer "
              "received")
WALK_EXACT = ("given the realized path (the observer is not told it): the linear-Gaussian view of every token value "
              "the observer received")
PLANNED_WALK_EXACT = ("the path told to the observer: the mixture over the simulated walks of each walk's exact loss, "
                      "an upper bound for an observer who is not told it")


def account(run: TokenRun, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses of `run` at the options' noise, sensitivity, order and δ."""
    bound = bound_of(run, options)
    losses = account_model(linear_model(run), bound.column(run.n), releases=run.visits(), notes=notes(bound),
                           **options)
    walk = run.topology.protocol.name == walk_sum.PROTOCOL_NAME
    losses.definitions.update({**DEFINITIONS, "exact": WALK_EXACT if walk else RING_EXACT})
    losses.exact_given = EXACT_GIVEN if walk else None
    above = losses.exact_rdp > losses.ldp_pairs("rdp") * (1 + RTOL)
    if np.any(above):
        u, v = (int(x[0]) for x in np.nonzero(above))
        losses.notes.append(
            f"exact exceeds ldp on {int(np.count_nonzero(above))} pairs (e.g. {u}->{v}): the observer saw the "
            "token before and after a stretch of contributions carrying less noise than one release at sigma each "
            "(bare ones between single placements, sigma/sqrt(n) ones when distributed), typically through the "
            "result; that stretch's inputs are pinned down better than local DP at sigma would allow")
    return losses


def notes(bound: PaperBound, columns: Sequence[str] = NOTES) -> list[str]:
    """What the columns are, and every condition of the paper's theorem that fails."""
    return [*columns, *(f"paper: {bound.theorem}'s condition '{condition.name}' fails: {condition.detail}"
                      for condition in bound.failing())]


def bound_of(run: TokenRun, options: AccountingOptions, *, realized: bool = True) -> PaperBound:
    """The paper bound of `run` at the options' noise, sensitivity, δ and threat model."""
    return paper_bound(run, sigma=options["sigma"], sensitivity=options["sensitivity"], delta=options["delta"],
                       threat_model=options.get("threat_model", ThreatModel()), realized=realized)
