"""Account a synchronous Muffliato run: every column of the report for every pair (u → v).

One entry point, `account`, for planned and realized runs alike (both are Transcripts):
* paper: Thm 1's RDP at α; its ε through RDP (the tight conversion of the per-pair Gaussian
  curve, or the classic one at α with ``conversion="paper"``);
* exact: the whole view as a Gaussian mechanism, ε by the exact Gaussian profile;
* local-DP and central-DP baselines at the same noise;
* empirical: the distinguishing attack, on the pairs asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from coordinator_tools.audit.attack import Pair, attack_pairs
from coordinator_tools.audit.baselines import central_dp, local_dp
from coordinator_tools.audit.conversion import Conversion, gaussian_epsilon, gaussian_rdp, gaussian_rdp_epsilon
from coordinator_tools.audit.exact import Method, exact_mu, view_geometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.paper import paper_mu
from coordinator_tools.audit.transcript import Transcript
from coordinator_tools.audit.views import observer_views

DEFAULT_DELTA = 1e-5
AttackPairs = Literal["all"] | Sequence[Pair] | None


def account(
    transcript: Transcript,
    *,
    sigma: float,
    sensitivity: float,
    alpha: float,
    delta: float = DEFAULT_DELTA,
    threat_model: ThreatModel = ThreatModel(),
    conversion: Conversion = "tight",
    attack_pairs: AttackPairs = None,
    attack_runs: int = 20_000,
    rng_seed: int | None = None,
    exact_method: Method = "auto",
) -> PairwiseLosses:
    """All pairwise losses of the run in `transcript` at noise σ, sensitivity Δ, order α, δ."""
    if alpha <= 1:
        raise ValueError(f"Renyi order must exceed 1, got {alpha}")
    n = transcript.n
    mu_paper = paper_mu(transcript, sigma=sigma, sensitivity=sensitivity, threat_model=threat_model)
    geometry = view_geometry(transcript, threat_model, method=exact_method)
    mu_lower, mu_upper = exact_mu(geometry, sigma=sigma, sensitivity=sensitivity)
    ldp = local_dp(sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta)
    central = central_dp(n=n, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta)
    losses = PairwiseLosses(
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
        notes=[f"paper (eps, delta) by the {conversion} RDP conversion; exact by the exact Gaussian profile"],
    )
    if attack_pairs is not None:
        _attack(losses, transcript, attack_pairs, attack_runs, rng_seed)
    losses.notes.extend(_invariant_notes(losses))
    return losses


def _attack(
    losses: PairwiseLosses, transcript: Transcript, pairs: AttackPairs, runs: int, rng_seed: int | None
) -> None:
    """Fill the empirical column for `pairs` ("all": every accounted pair)."""
    if pairs == "all":
        pairs = [(u, v) for v, view in enumerate(observer_views(transcript, losses.threat_model)) for u in view.sources()]
    results = attack_pairs(
        transcript,
        pairs,  # type: ignore[arg-type]
        sigma=losses.sigma,
        sensitivity=losses.sensitivity,
        delta=losses.delta,
        runs=runs,
        threat_model=losses.threat_model,
        rng_seed=rng_seed,
    )
    empirical = np.full((losses.n, losses.n), np.nan)
    for (u, v), result in results.items():
        empirical[u, v] = result.eps_lower
    losses.empirical_eps_lower = empirical
    losses.notes.append(f"empirical: simulation attack, {runs} replays per hypothesis, seed {rng_seed}")


def _invariant_notes(losses: PairwiseLosses) -> list[str]:
    """The spec's per-run checks, said in words: undercounting pairs and broken invariants."""
    notes = []
    with np.errstate(invalid="ignore"):
        under = int(np.sum(losses.paper_rdp < losses.exact_rdp * (1 - 1e-9)))
        above_ldp = int(np.sum(losses.exact_rdp_upper > losses.ldp_rdp * (1 + 1e-9)))
        beaten = 0
        if losses.empirical_eps_lower is not None:
            beaten = int(np.sum(losses.empirical_eps_lower > losses.exact_eps_upper))
    pairs = losses.n * (losses.n - 1)
    if under:
        notes.append(f"paper bound undercounts on {under} of {pairs} pairs (paper < exact)")
    if above_ldp:
        notes.append(f"INVARIANT BROKEN: exact above local DP on {above_ldp} pairs")
    if beaten:
        notes.append(f"INVARIANT BROKEN: attack beat the exact upper value on {beaten} pairs")
    if losses.ill_conditioned.any():
        notes.append(f"{int(losses.ill_conditioned.sum())} pairs ill-conditioned: exact is an interval")
    return notes
