"""What the Muffliato theorems promise, so planners and demos need not guess rounds or accuracy.

Utility of synchronous Muffliato (Muffliato Thm 2): after T_stop rounds the nodes' mean squared
distance to the true mean is of the order of the noise floor 3 sigma^2 / n. Values are per
coordinate; a D-dimensional run is D independent copies of the scalar one.
"""

from __future__ import annotations

import math


def muffliato_t_stop(n: int, spectral_gap: float, sigma: float, spread: float, accelerated: bool = True) -> int:
    """Rounds after which the averaging error has fallen to the noise floor (Muffliato Thm 2).

    T_stop = (1 / sqrt(lambda_W)) ln((n / sigma^2) max(sigma^2, spread)), with
    spread = (1/n) sum_v ||x_v - x_bar||^2. Plain gossip converges at rate lambda_W instead of
    sqrt(lambda_W), hence 1 / lambda_W. Passing the spread of whole vectors against the
    per-coordinate sigma can only overestimate T, never stop early. The log's argument is at
    least n >= 2, so the result is at least 1.
    """
    if n < 2:
        raise ValueError(f"need n >= 2 nodes, got n = {n}")
    if not 0.0 < spectral_gap <= 1.0:
        raise ValueError(f"spectral gap must be in (0, 1], got {spectral_gap}")
    if spread < 0.0:
        raise ValueError(f"spread is a mean of squares and cannot be negative, got {spread}")
    if sigma < 0.0:
        raise ValueError(f"sigma is a standard deviation and cannot be negative, got {sigma}")
    if sigma == 0.0:
        raise ValueError(
            "with sigma = 0 there is no noise floor to stop at; pass the number of rounds explicitly"
        )
    variance = sigma * sigma
    rate = math.sqrt(spectral_gap) if accelerated else spectral_gap
    return math.ceil(math.log(n / variance * max(variance, spread)) / rate)


def muffliato_mse_bound(n: int, sigma: float) -> float:
    """3 sigma^2 / n: the bound on (1/n) sum_v (x_v^T - x_bar)^2 per coordinate at T >= T_stop."""
    if n < 1:
        raise ValueError(f"need n >= 1 nodes, got n = {n}")
    return 3.0 * sigma * sigma / n


def randomized_muffliato_t_stop(n: int, spectral_gap: float, sigma: float, spread: float) -> int:
    """T_stop of Muffliato Thm 3 in edge activations, with weight-proportional activation p_vw = 2 W_vw / n.

    Then λ(p) = 2 λ_W / n (the paper's comparison rule) and T_stop = ln((n/σ²) max(σ², spread)) / λ(p).
    """
    if sigma == 0.0:
        raise ValueError("with sigma = 0 there is no noise floor to stop at")
    variance = sigma * sigma
    return math.ceil(math.log(n / variance * max(variance, spread)) * n / (2.0 * spectral_gap))


def randomized_muffliato_mse_bound(n: int, sigma: float) -> float:
    """4 σ² / n: Thm 3's (1/2n) Σ_v E‖x_v^t − x̄‖² ≤ 2σ²/n per coordinate, as (1/n) Σ_v, past T_stop."""
    if n < 1:
        raise ValueError(f"need n >= 1 nodes, got n = {n}")
    return 4.0 * sigma * sigma / n


def worst_case_spread(sensitivity: float) -> float:
    """Largest spread (1/n) sum_v ||x_v - x_bar||^2 of inputs clipped to the ball of radius Delta/2.

    The spread is at most the mean of ||x_v||^2 (the mean minimizes the sum of squares),
    hence at most (Delta / 2)^2, reached by half the nodes at each of two antipodes.
    """
    if sensitivity <= 0.0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity}")
    return (sensitivity / 2.0) ** 2
