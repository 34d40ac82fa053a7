"""Account a run from its linear-Gaussian model: every column of the report for every pair (u → v).

Protocol-neutral: each protocol's accountant builds its model (`core`) and its paper sum,
then calls `account_model`, so planned and realized runs of every protocol get the same
columns:
* paper: the protocol's closed form as a per-pair Gaussian μ (and its corrected form, where the
  protocol has one); its ε by the exact Gaussian profile like exact's, so that every compared
  column is on one basis (`conversion.closed_form_epsilon`), or by the paper's classic conversion
  at α with ``conversion="paper"``; a closed form stated in (ε, δ) only (the token walks'
  theorems) comes as a `ClosedForm`;
* exact: the whole view as a Gaussian mechanism, ε by the exact Gaussian profile;
* local-DP and central-DP baselines at the same noise;
* model attack: the audit's own model replayed with fresh simulated noise (`attack`), on the pairs
  asked for (or a column the protocol's accountant computed itself: learning runs simulate canaries
  on the model, `canary`): a self-check of the exact column, which cannot see how the real run
  differs from the model. The empirical column of a real run is the audit's (`empirical`), not here.
The invariants between the columns are checked by `checks`, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Required, TypedDict

import numpy as np

from coordinator_tools.audit import attack
from coordinator_tools.audit.baselines import central_dp, local_dp, local_dp_sources
from coordinator_tools.audit.conversion import (
    Conversion,
    closed_form_epsilon,
    gaussian_epsilon,
    gaussian_rdp,
    squared_mu,
)
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.exact import Method, ViewGeometry, exact_mu, view_geometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.views import observer_views

AttackPairs = Literal["all"] | Sequence[attack.Pair] | None
# How the notes say the paper columns' (ε, δ) were obtained, per conversion.
CONVERSION_NOTES: dict[Conversion, str] = {
    "tight": "paper (eps, delta) by the exact column's own conversion, the Gaussian privacy profile of its per-pair "
             "mu: one basis, so a closed form below the exact loss in RDP is below it in eps too",
    "paper": "paper (eps, delta) by the paper's classic conversion eps + ln(1/delta)/(alpha - 1) at alpha, to "
             "reproduce published figures: not the basis of the exact column (its Gaussian privacy profile), so "
             "compare the two in RDP",
}


@dataclass(frozen=True)
class ClosedForm:
    """A paper bound that is no per-pair Gaussian: its RDP at α (NaN: it states none) and its ε at δ, [u, v]."""

    rdp: np.ndarray
    eps: np.ndarray


class AccountingOptions(TypedDict, total=False):
    """What every protocol's `account(run, **options)` takes beside the run: `account_model`'s keywords."""

    sigma: Required[float]
    sensitivity: Required[float]
    alpha: Required[float]
    delta: Required[float]
    threat_model: ThreatModel
    conversion: Conversion
    attack_pairs: AttackPairs
    attack_runs: int
    rng_seed: int | None
    exact_method: Method


def account_model(
    model: LinearGaussianModel,
    paper_sum: np.ndarray | ClosedForm,
    *,
    sigma: float,
    sensitivity: float,
    alpha: float,
    delta: float,
    threat_model: ThreatModel = ThreatModel(),
    conversion: Conversion = "tight",
    attack_pairs: AttackPairs = None,
    attack_runs: int = attack.DEFAULT_RUNS,
    rng_seed: int | None = None,
    exact_method: Method = "auto",
    notes: Sequence[str] = (),
    geometry: ViewGeometry | None = None,
    releases: float | np.ndarray = 1,
    paper_corrected_sum: np.ndarray | None = None,
    model_attack_eps_lower: np.ndarray | None = None,
) -> PairwiseLosses:
    """All pairwise losses at noise σ, sensitivity Δ, order α, δ.

    `paper_sum` is the paper bound's σ-free factor [u, v]: its RDP is α (Δ/σ)² paper_sum / 2
    (`paper_corrected_sum` likewise, for protocols that have a corrected closed form), or the
    bound's own columns when it is no Gaussian (its note among `notes`).
    `geometry` replaces the projection of `model` when the protocol computes the exact σ-free
    factor itself (many contributions per node: a sensitivity over all of them); `model`
    still serves the attack. `releases` is how many noisy contributions of u the local-DP and
    central baselines see: one count for every source, or one per source (token walks: the
    local-DP baseline is then the worst source's and every pair gets its source's own, the
    central one releases the mean count). `model_attack_eps_lower` is a model-attack column computed
    elsewhere ([u, v], NaN where no pair was attacked; its note among `notes`), instead of the replay attack.
    """
    if alpha <= 1:
        raise ValueError(f"Renyi order must exceed 1, got {alpha}")
    def gaussian_closed_form(factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu = np.sqrt(squared_mu(factor, sigma=sigma, sensitivity=sensitivity))
        return gaussian_rdp(mu, alpha), closed_form_epsilon(mu, delta, alpha=alpha, conversion=conversion)

    stated = isinstance(paper_sum, ClosedForm)
    paper_rdp, paper_eps = ((paper_sum.rdp, paper_sum.eps) if isinstance(paper_sum, ClosedForm)
                            else gaussian_closed_form(paper_sum))
    if geometry is None:
        geometry = view_geometry(model, threat_model, method=exact_method)
    mu_lower, mu_upper = exact_mu(geometry, sigma=sigma, sensitivity=sensitivity)
    counts = np.asarray(releases, dtype=float)
    ldp = local_dp(sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta, releases=float(np.max(counts)))
    central = central_dp(n=model.n, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta,
                         releases=float(np.mean(counts)))
    ldp_sources = (None, None) if counts.ndim == 0 else local_dp_sources(
        counts, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta)
    corrected = None if paper_corrected_sum is None else gaussian_closed_form(paper_corrected_sum)
    notes = [*notes, "exact by the exact Gaussian profile" if stated else CONVERSION_NOTES[conversion]]
    model_attack = model_attack_eps_lower
    if attack_pairs is not None:
        if model_attack is not None:
            raise ValueError("pass attack_pairs or a precomputed model-attack column, not both")
        pairs = all_pairs(model, threat_model) if attack_pairs == "all" else attack_pairs
        results = attack.attack_pairs(
            model, pairs, sigma=sigma, sensitivity=sensitivity, delta=delta, runs=attack_runs,
            threat_model=threat_model, rng_seed=rng_seed,
        )  # fmt: skip
        model_attack = np.full((model.n, model.n), np.nan)
        for (u, v), result in results.items():
            model_attack[u, v] = result.eps_lower
        notes.append(f"model attack: the audit's model replayed, {attack_runs} replays per hypothesis, seed {rng_seed}")
    return PairwiseLosses(
        alpha=alpha,
        delta=delta,
        sigma=sigma,
        sensitivity=sensitivity,
        threat_model=threat_model,
        paper_rdp=paper_rdp,
        paper_eps=paper_eps,
        exact_rdp_lower=gaussian_rdp(mu_lower, alpha),
        exact_eps_lower=gaussian_epsilon(mu_lower, delta),
        exact_rdp_upper=gaussian_rdp(mu_upper, alpha),
        exact_eps_upper=gaussian_epsilon(mu_upper, delta),
        reconstructable=geometry.reconstructable,
        ill_conditioned=geometry.ill_conditioned,
        exact_method=geometry.method,
        ldp_rdp=ldp.rdp,
        ldp_eps=ldp.eps,
        central_rdp=central.rdp,
        central_eps=central.eps,
        model_attack_eps_lower=model_attack,
        attack_runs=attack_runs if attack_pairs is not None else None,
        paper_corrected_rdp=None if corrected is None else corrected[0],
        paper_corrected_eps=None if corrected is None else corrected[1],
        paper_conversion=None if stated else conversion,
        ldp_source_rdp=ldp_sources[0],
        ldp_source_eps=ldp_sources[1],
        notes=notes,
    )


def all_pairs(model: LinearGaussianModel, threat_model: ThreatModel) -> list[attack.Pair]:
    """Every accounted pair (u, v): u a source of v's view."""
    return [(u, v) for v, view in enumerate(observer_views(model, threat_model)) for u in view.sources()]
