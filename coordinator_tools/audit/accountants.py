"""Account a run from its linear-Gaussian model: every column of the report for every pair (u → v).

Protocol-neutral: each protocol's accountant builds its model (`core`) and its paper sum,
then calls `account_model`, so planned and realized runs of every protocol get the same
columns:
* paper: the protocol's closed form as a per-pair Gaussian μ; its ε through RDP (the tight
  conversion of the per-pair Gaussian curve, or the classic one at α with ``conversion="paper"``);
* exact: the whole view as a Gaussian mechanism, ε by the exact Gaussian profile;
* local-DP and central-DP baselines at the same noise;
* empirical: the distinguishing attack, on the pairs asked for.
The invariants between the columns are checked by `checks`, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Required, TypedDict

import numpy as np

from coordinator_tools.audit import attack
from coordinator_tools.audit.baselines import central_dp, local_dp
from coordinator_tools.audit.conversion import (
    Conversion,
    gaussian_epsilon,
    gaussian_rdp,
    gaussian_rdp_epsilon,
    squared_mu,
)
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.exact import Method, ViewGeometry, exact_mu, view_geometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.views import observer_views

AttackPairs = Literal["all"] | Sequence[attack.Pair] | None


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
    paper_sum: np.ndarray,
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
    releases: int = 1,
    paper_corrected_sum: np.ndarray | None = None,
) -> PairwiseLosses:
    """All pairwise losses at noise σ, sensitivity Δ, order α, δ.

    `paper_sum` is the paper bound's σ-free factor [u, v]: its RDP is α (Δ/σ)² paper_sum / 2
    (`paper_corrected_sum` likewise, for protocols that have a corrected closed form).
    `geometry` replaces the projection of `model` when the protocol computes the exact σ-free
    factor itself (many contributions per node: a sensitivity over all of them); `model`
    still serves the attack. `releases` is how many noisy contributions of u the local-DP and
    central baselines see.
    """
    if alpha <= 1:
        raise ValueError(f"Renyi order must exceed 1, got {alpha}")
    mu_paper = np.sqrt(squared_mu(paper_sum, sigma=sigma, sensitivity=sensitivity))
    if geometry is None:
        geometry = view_geometry(model, threat_model, method=exact_method)
    mu_lower, mu_upper = exact_mu(geometry, sigma=sigma, sensitivity=sensitivity)
    ldp = local_dp(sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta, releases=releases)
    central = central_dp(n=model.n, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta,
                         releases=releases)
    corrected = None
    if paper_corrected_sum is not None:
        mu_corrected = np.sqrt(squared_mu(paper_corrected_sum, sigma=sigma, sensitivity=sensitivity))
        corrected = (gaussian_rdp(mu_corrected, alpha),
                     gaussian_rdp_epsilon(mu_corrected, delta, alpha=alpha, conversion=conversion))
    notes = [*notes, f"paper (eps, delta) by the {conversion} RDP conversion; exact by the exact Gaussian profile"]
    empirical = None
    if attack_pairs is not None:
        pairs = _all_pairs(model, threat_model) if attack_pairs == "all" else attack_pairs
        results = attack.attack_pairs(
            model, pairs, sigma=sigma, sensitivity=sensitivity, delta=delta, runs=attack_runs,
            threat_model=threat_model, rng_seed=rng_seed,
        )  # fmt: skip
        empirical = np.full((model.n, model.n), np.nan)
        for (u, v), result in results.items():
            empirical[u, v] = result.eps_lower
        notes.append(f"empirical: simulated attack, {attack_runs} replays per hypothesis, seed {rng_seed}")
    return PairwiseLosses(
        alpha=alpha,
        delta=delta,
        sigma=sigma,
        sensitivity=sensitivity,
        threat_model=threat_model,
        paper_rdp=gaussian_rdp(mu_paper, alpha),
        paper_eps=gaussian_rdp_epsilon(mu_paper, delta, alpha=alpha, conversion=conversion),
        exact_rdp=gaussian_rdp(mu_lower, alpha),
        exact_eps=gaussian_epsilon(mu_lower, delta),
        exact_rdp_upper=gaussian_rdp(mu_upper, alpha),
        exact_eps_upper=gaussian_epsilon(mu_upper, delta),
        reconstructable=geometry.reconstructable,
        ill_conditioned=geometry.ill_conditioned,
        exact_method=geometry.method,
        ldp_rdp=ldp.rdp,
        ldp_eps=ldp.eps,
        central_rdp=central.rdp,
        central_eps=central.eps,
        empirical_eps_lower=empirical,
        paper_corrected_rdp=None if corrected is None else corrected[0],
        paper_corrected_eps=None if corrected is None else corrected[1],
        notes=notes,
    )


def _all_pairs(model: LinearGaussianModel, threat_model: ThreatModel) -> list[attack.Pair]:
    """Every accounted pair (u, v): u a source of v's view."""
    return [(u, v) for v, view in enumerate(observer_views(model, threat_model)) for u in view.sources()]
