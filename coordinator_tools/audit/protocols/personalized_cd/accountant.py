"""Account a personalized-CD run: what each agent's releases cost it, and so every pair (u → v).

Each update of agent u releases a model that is ε_t-DP in u's data (Laplace noise on its clipped
gradient, Thm 1's proof), and everything any node sees of u, its broadcasts or models computed
from them, is a post-processing of that sequence. So every observer's loss about u is at most the
composition of u's logged ε_t, and the columns are per source, the same for every observer:
* paper: Thm 1 (the paper's composition, Kairouz et al.) at the report's δ; an (ε, δ) bound, no RDP;
* exact: the privacy-loss distribution of the Laplace releases composed (`dp-accounting`'s PLD
  accountant with Laplace events), ε at the report's δ, and their RDP at α (Mironov's exact
  Laplace RDP, summed): tight for the sequence u released, an upper bound for each observer
  (the page's definition says so: not the exact loss of an observer that sees less);
* ldp: the same (an observer that sees every release of u sees exactly that sequence);
* central: none (no trusted curator in this protocol).
The report's `sigma` is the noise relative to the logged scales (1 as run; 2 halves every ε_t,
the monotonicity check), 0 for non-private CD, whose releases are not private at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Unpack

import dp_accounting
import numpy as np
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

from coordinator_tools.audit.accountants import AccountingOptions
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.personalized_cd.run import BroadcastRun
from node.budget import theorem1_epsilon

NOTES = (
    ("personalized-cd: each update of a source releases a model that is eps_t-DP in its data (Laplace noise on its "
     "l1-clipped gradient, AISTATS 2018 Thm 1); every observer's view of the source is a post-processing of those "
     "releases, so each column is the source's composed loss, the same for every observer; sigma is the noise "
     "relative to the logged Laplace scales (1 as run)"),
    ("paper: Thm 1 (Kairouz et al. composition as the paper states it) of the logged eps_t at the report's "
     "delta; no RDP"),
    ("exact: dp-accounting's privacy-loss-distribution accountant with one Laplace event per release (eps at the "
     "report's delta) and the exact Laplace RDP summed (at alpha): tight for the source's releases, an upper bound "
     "for each observer; ldp: the same; central: none"),
)

# One line per column for the report page: every column is the source's, whoever observes.
DEFINITIONS = {
    "paper": "Thm 1 (Kairouz et al. composition) of all the source's logged eps_t at the report's delta, the same for "
             "every observer; no RDP",
    "exact": "upper bound: the composition of all the source's releases (PLD at delta, exact Laplace RDP at alpha), "
             "the same for every observer; exact for one that sees every release, above the loss of one that sees "
             "fewer (a non-neighbour sees only what neighbours pass on)",
    "ldp": "the composition of all the source's releases (as exact)",
}


def laplace_event(epsilons: Sequence[float]) -> dp_accounting.DpEvent:
    """Releases at these ε, each a Laplace mechanism of noise multiplier 1/ε, equal ones grouped."""
    values, counts = np.unique(np.asarray(epsilons, dtype=float), return_counts=True)
    return dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(noise_multiplier=1.0 / value), int(count))
        for value, count in zip(values, counts)])


def pld_epsilon(epsilons: Sequence[float], delta: float) -> float:
    """ε at δ of the composed releases, by the PLD accountant (δ = 0: the plain sum, exact for pure DP)."""
    if not len(epsilons):
        return 0.0
    if not np.all(np.isfinite(epsilons)):
        return math.inf
    if delta == 0.0:
        return float(np.sum(epsilons))
    accountant = PLDAccountant()
    accountant.compose(laplace_event(epsilons))
    return min(float(accountant.get_epsilon(delta)), float(np.sum(epsilons)))


def laplace_rdp(epsilons: Sequence[float], alpha: float) -> float:
    """RDP at order α of the composed releases (the exact Laplace RDP of each, summed)."""
    if not len(epsilons):
        return 0.0
    if not np.all(np.isfinite(epsilons)):
        return math.inf
    accountant = RdpAccountant(orders=[alpha])
    accountant.compose(laplace_event(epsilons))
    return float(accountant.rdp[0])


def scaled_spends(run: BroadcastRun, sigma: float) -> list[np.ndarray]:
    """Every agent's ε_t at noise `sigma` times the logged scales (σ = 0: unprotected)."""
    spends = [np.asarray(run.spends.get(agent, ()), dtype=float) for agent in range(run.n)]
    return [spent / sigma if sigma > 0.0 else np.full(spent.shape, np.inf) for spent in spends]


def account(run: BroadcastRun, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """Every column for every pair: the source's composed loss at the options' σ, α and δ."""
    alpha, delta, n = options["alpha"], options["delta"], run.n
    spends = scaled_spends(run, options["sigma"])
    paper = np.array([theorem1_epsilon(spent, delta) if np.all(np.isfinite(spent)) else math.inf
                      for spent in spends])
    eps = np.array([pld_epsilon(spent, delta) for spent in spends])
    rdp = np.array([laplace_rdp(spent, alpha) for spent in spends])

    def per_source(values: np.ndarray) -> np.ndarray:
        matrix = np.repeat(values[:, None], n, axis=1)
        np.fill_diagonal(matrix, np.nan)
        return matrix

    return PairwiseLosses(
        alpha=alpha, delta=delta, sigma=options["sigma"], sensitivity=options["sensitivity"],
        threat_model=options.get("threat_model", ThreatModel()),
        paper_rdp=np.full((n, n), np.nan), paper_eps=per_source(paper),
        exact_rdp_lower=per_source(rdp), exact_eps_lower=per_source(eps),
        exact_rdp_upper=per_source(rdp), exact_eps_upper=per_source(eps),
        reconstructable=np.zeros((n, n), dtype=bool), ill_conditioned=np.zeros((n, n), dtype=bool),
        exact_method="pld", ldp_rdp=float(rdp.max()), ldp_eps=float(eps.max()), central_rdp=math.nan,
        central_eps=math.nan, ldp_source_rdp=rdp, ldp_source_eps=eps, notes=list(NOTES),
        definitions=dict(DEFINITIONS))
