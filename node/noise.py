"""Noise samplers. Each node owns exactly one; its seed never leaves the node.

* ``SecureGaussianSampler`` (default): OpenDP's Gaussian mechanism, which samples an exact
  discrete Gaussian on a 2^k grid from a CSPRNG and rounds exactly, so the released
  floats are safe against floating-point attacks. The grid costs a slightly larger
  effective sensitivity, which OpenDP's privacy map reports and we record.
* ``SimulationSampler``: numpy's seeded generator, for fast reproducible experiments and
  tests. Logs record which kind ran; reports mark simulation results.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

import numpy as np

SamplerKind = Literal["secure", "simulation"]


class GaussianSampler(Protocol):
    kind: SamplerKind

    def perturb(self, value: np.ndarray, sigma: float) -> np.ndarray:
        """Return value + N(0, sigma^2 I) (sigma = 0 returns an exact copy)."""
        ...

    def effective_sensitivity(self, sensitivity: float, sigma: float) -> float:
        """Sensitivity the accountant must use for this sampler (grid effects included)."""
        ...


class SecureGaussianSampler:
    """CSPRNG-backed exact discrete Gaussian via OpenDP (floating-point safe)."""

    kind: SamplerKind = "secure"

    def __init__(self) -> None:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        self._dp = dp

    def _measurement(self, dimension: int, sigma: float):
        dp = self._dp
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), dimension)
        return dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=sigma)

    def perturb(self, value: np.ndarray, sigma: float) -> np.ndarray:
        flat = np.asarray(value, dtype=np.float64).ravel()
        if sigma == 0.0:
            return flat.copy().reshape(np.shape(value))
        released = self._measurement(flat.size, sigma)(flat.tolist())
        return np.asarray(released, dtype=np.float64).reshape(np.shape(value))

    def effective_sensitivity(self, sensitivity: float, sigma: float) -> float:
        if sigma == 0.0:
            return sensitivity
        rho = self._measurement(1, sigma).map(sensitivity)  # zCDP: rho = Δ_eff² / (2σ²)
        return max(sensitivity, sigma * math.sqrt(2.0 * rho))


class SimulationSampler:
    """Seeded numpy Gaussian noise: reproducible, fast, not for real privacy claims."""

    kind: SamplerKind = "simulation"

    def __init__(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(seed)

    def perturb(self, value: np.ndarray, sigma: float) -> np.ndarray:
        value = np.asarray(value, dtype=np.float64)
        if sigma == 0.0:
            return value.copy()
        return value + self._rng.normal(0.0, sigma, size=value.shape)

    def effective_sensitivity(self, sensitivity: float, sigma: float) -> float:
        return sensitivity


def make_sampler(kind: SamplerKind, seed: int | None = None) -> GaussianSampler:
    """The sampler a node runs with; a seed is only meaningful for the simulation sampler."""
    if kind == "secure":
        if seed is not None:
            raise ValueError("the secure sampler takes no seed")
        return SecureGaussianSampler()
    return SimulationSampler(seed)
