"""Local-DP and central-DP baselines at the same noise as the gossip run.

Both are Gaussian mechanisms, so each is one μ, reported as RDP at α and exact ε at δ:
* local DP: v sees u's noisy input x_u + η_u itself, μ = Δ/σ (the worst any gossip view
  can be, since ‖Π_v e_u‖ ≤ 1);
* central DP: a trusted aggregator releases the sum of the n inputs with all n noise draws,
  total variance nσ², μ = Δ/(σ√n).
Where sources contribute different numbers of times (token walks), each source has its own
local-DP loss (`local_dp_sources`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.conversion import gaussian_epsilon, gaussian_rdp, squared_mu


@dataclass(frozen=True)
class BaselineLoss:
    """One baseline: its Gaussian μ, its RDP at order α, and its ε at δ."""

    mu: float
    rdp: float
    eps: float


def local_dp(*, sigma: float, sensitivity: float, alpha: float, delta: float, releases: float = 1) -> BaselineLoss:
    """u's noisy contributions seen directly: `releases` Gaussian mechanisms compose into one of μ√releases."""
    return _gaussian(float(releases), sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta)


def local_dp_sources(releases: np.ndarray, *, sigma: float, sensitivity: float, alpha: float,
                     delta: float) -> tuple[np.ndarray, np.ndarray]:
    """(rdp, eps) per source u whose `releases[u]` noisy contributions are seen directly."""
    mu = np.sqrt(squared_mu(np.asarray(releases, dtype=float), sigma=sigma, sensitivity=sensitivity))
    return gaussian_rdp(mu, alpha), gaussian_epsilon(mu, delta)


def central_dp(*, n: int, sigma: float, sensitivity: float, alpha: float, delta: float,
               releases: float = 1) -> BaselineLoss:
    """The sums released by a trusted aggregator that adds everyone's noise, `releases` times."""
    return _gaussian(releases / n, sigma=sigma, sensitivity=sensitivity, alpha=alpha, delta=delta)


def _gaussian(geometry: float, *, sigma: float, sensitivity: float, alpha: float, delta: float) -> BaselineLoss:
    mu = math.sqrt(float(squared_mu(geometry, sigma=sigma, sensitivity=sensitivity)))
    return BaselineLoss(mu=mu, rdp=float(gaussian_rdp(mu, alpha)), eps=float(gaussian_epsilon(mu, delta)))
