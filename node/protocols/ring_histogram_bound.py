"""PAbD Thm 2 (the ring histogram, Alg. 2) as its proof supports: the run's (ε', δ) for RR_γ's ε₀.

The proof (App. B) takes each window between two visits of an observer, the token's change,
as a histogram of n answers of RR_γ, i.e. a shuffle of n reports of an ε₀-LDP randomizer
(ε₀ = ln(1 + L(1 − γ)/γ)), and bounds it by Erlingsson et al.'s Cor. 9 (SODA 2019, quoted as
PAbD's Thm 4): for n ≥ 100, 0 < ε₀ < 1/2 and δ_w < 1/100 the shuffle is (ε_w, δ_w)-DP with

    ε_w = 12 ε₀ √(ln(1/δ_w)/n);

advanced composition of the K windows then gives (√(2K ln(1/δ')) ε_w + K ε_w(e^{ε_w} − 1),
K δ_w + δ') network DP, for any split of δ between K δ_w and δ'.

The theorem's statement instead sets γ so that RR_γ is 12 ε √(ln(1/δ)/n)-LDP and promises
(ε, δ) per window: the corollary solved with ε₀ and ε swapped. Cor. 9 at that ε₀ gives
ε_w = 144 ε ln(1/δ)/n, at most ε only when n ≥ 144 ln(1/δ) (1990 nodes at δ = 10⁻⁶); and read
that way ε_w *falls* as δ_w falls, so its composed bound has no best split. netdp states and
calibrates by the proof (`proof_bound`), and keeps the statement's value beside it (`stated_*`,
at the proof's split) so that a reader sees where the two disagree.

The split is searched for real: the composed bound grows without limit at both ends (δ' → 0,
δ_w → 0), so a logit grid over δ'/δ brackets its minimum and Brent's method refines it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

AMPLIFICATION_CONSTANT = 12.0  # Cor. 9's ε = 12 ε₀ √(ln(1/δ)/n)
MIN_REPORTS = 100  # Cor. 9: n ≥ 100 shuffled reports
MAX_LOCAL_EPSILON = 0.5  # Cor. 9: 0 < ε₀ < 1/2
MAX_WINDOW_DELTA = 0.01  # Cor. 9: δ < 1/100
# The split δ'/δ = expit(x) is searched over x on this grid (δ' from 4e-18 δ to δ(1 − 4e-18)), then refined.
SPLIT_LOGITS = np.linspace(-40.0, 40.0, 161)
SPLIT_XATOL = 1e-9


class Thm2Condition(NamedTuple):
    """One condition the bound needs (Erlingsson et al.'s Cor. 9, which Thm 2's proof applies), with its value."""

    name: str
    holds: bool
    detail: str


@dataclass(frozen=True)
class Thm2Bound:
    """The run's ε' at δ by Thm 2's proof for RR_γ at LDP level ε₀, the split giving it, the statement's value."""

    epsilon: float  # ε' of the K windows composed
    delta: float  # K δ_w + δ'
    local_epsilon: float  # ε₀ of RR_γ
    window_epsilon: float  # ε_w by Cor. 9
    window_delta: float  # δ_w
    delta_prime: float  # δ' of advanced composition
    stated_window_epsilon: float  # what the statement promises per window at δ_w for this ε₀
    stated_epsilon: float  # that, composed at the same split

    @property
    def amplification(self) -> float:
        """ε_w / ε₀ = 12 √(ln(1/δ_w)/n): below 1 only when shuffling the window's answers amplifies at all."""
        return self.window_epsilon / self.local_epsilon if self.local_epsilon > 0.0 else math.nan


def window_epsilon(local_epsilon: float, *, n: int, window_delta: float) -> float:
    """Cor. 9's ε_w = 12 ε₀ √(ln(1/δ_w)/n) for a shuffle of n ε₀-LDP answers (the proof's per-window ε)."""
    return AMPLIFICATION_CONSTANT * local_epsilon * math.sqrt(math.log(1.0 / window_delta) / n)


def stated_window_epsilon(local_epsilon: float, *, n: int, window_delta: float) -> float:
    """The statement's per-window ε for RR_γ at ε₀: its calibration ε₀ = 12 ε √(ln(1/δ)/n) solved for ε."""
    return local_epsilon / (AMPLIFICATION_CONSTANT * math.sqrt(math.log(1.0 / window_delta) / n))


def advanced_composition(epsilon: float, *, windows: int, delta_prime: float) -> float:
    """√(2K ln(1/δ')) ε + K ε(e^ε − 1): K (ε, δ_w)-DP releases together, at δ = K δ_w + δ'."""
    if epsilon == 0.0:
        return 0.0
    if math.isinf(epsilon) or epsilon > 700.0:  # e^ε overflows: the bound is infinite in floating point
        return math.inf
    return math.sqrt(2.0 * windows * math.log(1.0 / delta_prime)) * epsilon + windows * epsilon * math.expm1(epsilon)


def proof_bound(local_epsilon: float, *, n: int, cycles: int, delta: float) -> Thm2Bound:
    """The smallest ε' Thm 2's proof gives at δ_total = `delta` for RR_γ at ε₀, over every split of δ."""
    # scipy only when a ring-histogram bound is computed: every other node process runs without it.
    from scipy.optimize import minimize_scalar
    from scipy.special import expit

    if not 0.0 < delta < 1.0 or n < 1 or cycles < 1 or local_epsilon < 0.0:
        raise ValueError(f"Thm 2's bound needs n >= 1, K >= 1, eps0 >= 0 and delta in (0, 1); got n = {n}, "
                         f"K = {cycles}, eps0 = {local_epsilon}, delta = {delta}")

    def split(logit: float) -> tuple[float, float]:
        """(δ_w, δ') with δ' = expit(x) δ and K δ_w = expit(−x) δ, each without cancellation."""
        return float(expit(-logit)) * delta / cycles, float(expit(logit)) * delta

    def composed(logit: float) -> float:
        window_delta, delta_prime = split(logit)
        return advanced_composition(window_epsilon(local_epsilon, n=n, window_delta=window_delta),
                                    windows=cycles, delta_prime=delta_prime)

    values = [composed(x) for x in SPLIT_LOGITS]
    best = int(np.argmin(values))
    logit = float(SPLIT_LOGITS[best])
    if math.isfinite(values[best]) and 0 < best < len(SPLIT_LOGITS) - 1:
        refined = minimize_scalar(composed, bounds=(SPLIT_LOGITS[best - 1], SPLIT_LOGITS[best + 1]),
                                  method="bounded", options={"xatol": SPLIT_XATOL})
        if refined.fun < values[best]:
            logit = float(refined.x)
    window_delta, delta_prime = split(logit)
    stated = stated_window_epsilon(local_epsilon, n=n, window_delta=window_delta)
    return Thm2Bound(
        epsilon=composed(logit), delta=delta, local_epsilon=local_epsilon,
        window_epsilon=window_epsilon(local_epsilon, n=n, window_delta=window_delta),
        window_delta=window_delta, delta_prime=delta_prime, stated_window_epsilon=stated,
        stated_epsilon=advanced_composition(stated, windows=cycles, delta_prime=delta_prime))


def corollary_conditions(n: int, local_epsilon: float, window_delta: float) -> tuple[Thm2Condition, ...]:
    """Cor. 9's conditions for the windows' shuffles: the ones the proof's bound needs, with their values."""
    return (
        Thm2Condition("n >= 100 (answers shuffled per window)", n >= MIN_REPORTS, f"n = {n}"),
        Thm2Condition("0 < eps0 < 1/2 (LDP level of RR_gamma)",
                      bool(0.0 < local_epsilon < MAX_LOCAL_EPSILON), f"eps0 = {local_epsilon:.6g}"),
        Thm2Condition("delta_w < 1/100 (each window's delta)", bool(window_delta < MAX_WINDOW_DELTA),
                      f"delta_w = {window_delta:.6g}"),
    )
