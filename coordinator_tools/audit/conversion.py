"""From Gaussian views and RDP curves to (ε, δ), vectorised over the n² pairs.

Units: ``mu`` is the Gaussian-DP parameter of a view (mean shift over noise std), ``rdp`` a
Rényi divergence in nats at an order, ``epsilon`` in nats at a given δ. Every function takes
arrays and maps them element-wise; NaN (the pairwise arrays' diagonal) stays NaN and ∞ (no
noise) stays ∞.

* Gaussian views: the exact privacy profile, no RDP detour:
  δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).
* RDP curves: the tight conversion that `dp_accounting.rdp.compute_epsilon` implements
  (Canonne–Kamath–Steinke / Balle et al. 2020), re-stated on arrays so n² pairs convert in one
  pass (tests pin it to the library), and the classic ε = rdp + ln(1/δ)/(α − 1) that published
  figures use.
* Mixtures over K equally likely public settings (simulated schedules) that the observer
  learns: RDP (1/(α−1)) log E_k exp((α−1)·rdp_k), and the exact ε of Gaussian views from the
  averaged profile δ(ε) = E_k δ_k(ε) (the hockey-stick divergence of a known mixture is the
  mean of its components').
* Closed forms stated as a Gaussian μ per pair (Muffliato's theorems): on one basis with the
  exact column by default, i.e. through the same exact profile, so that ε orders the pairs as μ
  does and a closed form below the exact loss in RDP is below it in ε too (the tight RDP
  conversion of the smaller μ can exceed the exact profile's ε of the larger, and would hide it);
  or by the paper's own classic conversion, to reproduce published figures.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS
from numpy.typing import ArrayLike
from scipy.special import log_ndtr, logsumexp, ndtr

# A paper column's (ε, δ): "tight" (a Gaussian μ per pair by the exact profile, as the exact column; an RDP curve
# by the tight RDP conversion) or "paper" (the classic conversion at α that published figures use).
Conversion = Literal["tight", "paper"]

# dp_accounting's grid, extended so that faint pairs (tiny μ) find their optimal large order.
ORDERS = np.array(sorted(set(DEFAULT_RDP_ORDERS) | {2.0**k for k in range(11, 21)}))
# dp_accounting's tight bound is unstable as α → 1 and not used below this order.
MIN_TIGHT_ORDER = 1.01
# Gaussian ε solver: relative precision and iteration cap of the safeguarded Newton search.
EPSILON_RTOL = 1e-12
MAX_ITERATIONS = 200
# Pairs converted per block when a curve per pair is materialised.
BLOCK_PAIRS = 1 << 15


def squared_mu(geometry: ArrayLike, *, sigma: float, sensitivity: float) -> np.ndarray:
    """μ² = (Δ/σ)² · g for a Gaussian view whose σ-free geometry factor is g ≥ 0.

    σ = 0 means no noise: the loss is infinite wherever the view depends on the input
    (g > 0) and zero where it does not, with no division warnings.
    """
    g = np.asarray(geometry, dtype=float)
    if sigma < 0 or sensitivity <= 0:
        raise ValueError(f"need sigma >= 0 and sensitivity > 0, got {sigma}, {sensitivity}")
    if sigma == 0:
        return np.where(g > 0, np.inf, g)
    return (sensitivity / sigma) ** 2 * g


def gaussian_rdp(mu: ArrayLike, alpha: ArrayLike) -> np.ndarray:
    """Rényi divergence of a μ-Gaussian mechanism at order α: α μ²/2."""
    array: np.ndarray = np.asarray(alpha, dtype=float) * np.square(np.asarray(mu, dtype=float)) / 2
    return array


def gaussian_delta(mu: ArrayLike, epsilon: ArrayLike) -> np.ndarray:
    """The exact δ(ε) of a μ-Gaussian mechanism, for finite μ > 0 and finite ε."""
    delta, _ = _profile(np.asarray(mu, dtype=float), np.asarray(epsilon, dtype=float))
    return delta


def gaussian_epsilon(mu: ArrayLike, delta: float) -> np.ndarray:
    """The smallest ε with δ(ε) ≤ δ for a μ-Gaussian mechanism, element-wise.

    δ(ε) is convex and decreasing, so Newton steps from a point left of the root stay left
    of it; each step is kept inside a bracket [lo, hi] that starts at [0, RDP bound].
    """
    _check_delta(delta)
    mu = np.asarray(mu, dtype=float)
    result = np.full(mu.shape, np.nan)
    result[mu == 0] = 0.0
    result[np.isposinf(mu)] = np.inf
    solve = np.isfinite(mu) & (mu > 0)
    m = mu[solve]
    eps = np.zeros_like(m)
    lo = np.zeros_like(m)
    hi = m**2 / 2 + m * np.sqrt(2 * np.log(1 / delta))  # the RDP conversion: never below ε
    active = np.flatnonzero(_profile(m, eps)[0] > delta)
    for _ in range(MAX_ITERATIONS):
        if active.size == 0:
            break
        e = eps[active]
        profile, slope = _profile(m[active], e)
        excess = profile - delta
        low = np.where(excess > 0, e, lo[active])
        high = np.where(excess <= 0, e, hi[active])
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            step = e + excess / slope
        following = np.where((step > low) & (step < high), step, (low + high) / 2)
        eps[active], lo[active], hi[active] = following, low, high
        active = active[np.abs(following - e) > EPSILON_RTOL * following]
    result[solve] = eps
    return result


def rdp_to_epsilon(orders: ArrayLike, rdp: ArrayLike, delta: float) -> np.ndarray:
    """Tight (ε at δ) of RDP curves: ``rdp[..., k]`` is the divergence at ``orders[k]``.

    Element-wise the same as `dp_accounting.rdp.compute_epsilon`, except that a negative
    divergence is an error here (the library would silently report ε = 0 for it).
    """
    _check_delta(delta)
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    _check_rdp(rdp)
    if np.any(orders < 1):
        raise ValueError("Renyi orders must be at least 1")
    with np.errstate(invalid="ignore", divide="ignore"):
        offset = np.log1p(-1 / orders) - np.log(delta * orders) / (orders - 1)
    offset = np.where(orders > MIN_TIGHT_ORDER, offset, np.inf)
    bound = rdp + offset
    # the library's KL case, δ² + expm1(−rdp) > 0, as one comparison with a threshold
    bound[rdp < -np.log1p(-(delta**2))] = 0.0
    bound[np.isnan(rdp)] = np.nan
    array: np.ndarray = np.maximum(0.0, np.min(bound, axis=-1))
    return array


def classic_epsilon(rdp: ArrayLike, alpha: float, delta: float) -> np.ndarray:
    """The classic conversion at one order, ε = rdp + ln(1/δ)/(α − 1) (Mironov 2017, Prop. 3)."""
    _check_delta(delta)
    rdp = np.asarray(rdp, dtype=float)
    _check_rdp(rdp)
    array: np.ndarray = rdp + np.log(1 / delta) / (alpha - 1)
    return array


def gaussian_rdp_epsilon(mu: ArrayLike, delta: float, *, alpha: float, conversion: Conversion,
                         orders: np.ndarray = ORDERS) -> np.ndarray:
    """ε at δ of the RDP curve α ↦ α μ²/2, through RDP as a published bound would be.

    ``tight`` converts the curve over `orders` (a bound that holds at some orders only converts
    over those); ``paper`` uses the classic conversion at the single order α, to reproduce
    published figures.
    """
    mu = np.asarray(mu, dtype=float)
    if conversion == "paper":
        return classic_epsilon(gaussian_rdp(mu, alpha), alpha, delta)
    flat = mu.ravel()
    eps = np.empty_like(flat)
    for start in range(0, flat.size, BLOCK_PAIRS):
        block = flat[start : start + BLOCK_PAIRS]
        eps[start : start + BLOCK_PAIRS] = rdp_to_epsilon(orders, gaussian_rdp(block[:, None], orders), delta)
    return eps.reshape(mu.shape)


def closed_form_epsilon(mu: ArrayLike, delta: float, *, alpha: float, conversion: Conversion) -> np.ndarray:
    """ε at δ of a closed form that is a μ-Gaussian mechanism per pair.

    ``tight``: the exact Gaussian profile, the exact column's own conversion (one basis); ``paper``:
    the classic conversion at α, the paper's own, whose ε is on another basis than the exact column's.
    """
    mu = np.asarray(mu, dtype=float)
    if conversion == "paper":
        return classic_epsilon(gaussian_rdp(mu, alpha), alpha, delta)
    return gaussian_epsilon(mu, delta)


def closed_form_mixture_epsilon(mu: ArrayLike, delta: float, *, alpha: float, conversion: Conversion) -> np.ndarray:
    """`closed_form_epsilon` of a mixture (μ_k along axis 0) whose component the observer learns.

    ``tight``: the averaged exact profile, as the exact column's mixture; ``paper``: the classic
    conversion of the mixture's RDP at α.
    """
    mu = np.asarray(mu, dtype=float)
    if conversion == "paper":
        return classic_epsilon(mixture_rdp(gaussian_rdp(mu, alpha), alpha), alpha, delta)
    return gaussian_mixture_epsilon(mu, delta)


def mixture_rdp(rdp: ArrayLike, alpha: ArrayLike) -> np.ndarray:
    """RDP at order α > 1 of a mixture over axis 0 of `rdp` whose component the observer learns."""
    rdp = np.asarray(rdp, dtype=float)
    alpha = np.asarray(alpha, dtype=float)
    array: np.ndarray = (logsumexp((alpha - 1) * rdp, axis=0) - np.log(rdp.shape[0])) / (alpha - 1)
    return array


def gaussian_mixture_epsilon(mu: ArrayLike, delta: float) -> np.ndarray:
    """The smallest ε with E_k δ_{μ_k}(ε) ≤ δ (μ_k along axis 0), element-wise over the rest.

    Bisection on [0, max_k ε_k] (at the right end every component meets δ), returning the
    right end of the final bracket: never below the true ε. A component without noise (μ = ∞)
    makes the mixture's ε infinite.
    """
    _check_delta(delta)
    mu = np.asarray(mu, dtype=float)
    high = np.max(gaussian_epsilon(mu, delta), axis=0)
    result: np.ndarray = high.copy()
    solve = np.flatnonzero(np.isfinite(high) & (high > 0))
    components = mu.reshape(mu.shape[0], -1)[:, solve]
    low, high = np.zeros(solve.size), high.ravel()[solve]
    for _ in range(MAX_ITERATIONS):
        if not np.any(high - low > EPSILON_RTOL * high):
            break
        middle = (low + high) / 2
        met = _mixture_delta(components, middle) <= delta
        low, high = np.where(met, low, middle), np.where(met, middle, high)
    result.ravel()[solve] = high
    return result


def _mixture_delta(mu: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    """E_k δ_{μ_k}(ε) for finite μ_k ≥ 0 (a component with μ = 0 contributes nothing)."""
    positive = mu > 0
    safe = np.where(positive, mu, 1.0)
    delta, _ = _profile(safe, np.broadcast_to(epsilon, mu.shape))
    array: np.ndarray = np.where(positive, delta, 0.0).mean(axis=0)
    return array


def _profile(mu: np.ndarray, epsilon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(δ(ε), −dδ/dε) of a μ-Gaussian: Φ(−ε/μ + μ/2) − t with t = e^ε Φ(−ε/μ − μ/2) (log space)."""
    tail = np.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2))
    return ndtr(-epsilon / mu + mu / 2) - tail, tail


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def _check_rdp(rdp: np.ndarray) -> None:
    if np.any(rdp < 0):
        raise ValueError(f"negative Renyi divergence {np.nanmin(rdp)}: refusing to convert it")
