"""Noise samplers. Each node owns one bundle of them; its seed never leaves the node.

Three mechanisms, each in two kinds:
* Gaussian N(0, σ² I) on vectors (Muffliato, random-walk SGD),
* Laplace Lap(b) on vectors (personalized learning),
* L-ary randomized response on a category 0..L-1 (ring histograms).

"secure" (default) samples through OpenDP: exact discrete Gaussian/Laplace on a 2^k grid from a
CSPRNG with exact rounding, so released floats are safe against floating-point attacks (the
grid costs a slightly larger effective sensitivity, which OpenDP's privacy map reports and we
record), and exact Bernoulli draws for randomized response. "simulation" uses numpy's seeded
generator, for fast reproducible experiments and tests; logs record which kind ran and reports
mark simulation results. No sampler keeps its seed: only the generator it seeded.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal, Protocol

import numpy as np

SamplerKind = Literal["secure", "simulation"]


class GaussianSampler(Protocol):
    kind: SamplerKind

    def perturb(self, value: np.ndarray, sigma: float) -> np.ndarray:
        """Return value + N(0, sigma^2 I) (sigma = 0 returns an exact copy)."""
        ...

    def effective_sensitivity(self, sensitivity: float, sigma: float) -> float:
        """l2 sensitivity the accountant must use for this sampler (grid effects included)."""
        ...


class LaplaceSampler(Protocol):
    kind: SamplerKind

    def perturb(self, value: np.ndarray, scale: float) -> np.ndarray:
        """Return value + i.i.d. Laplace(scale) noise (std scale·√2; scale = 0 returns an exact copy)."""
        ...

    def effective_sensitivity(self, sensitivity: float, scale: float) -> float:
        """l1 sensitivity the accountant must use for this sampler (grid effects included)."""
        ...


class RandomizedResponseSampler(Protocol):
    kind: SamplerKind

    def respond(self, value: int, categories: int, epsilon: float) -> int:
        """L-ary randomized response: `value` with probability keep_probability(epsilon, L), else another uniformly."""
        ...


def keep_probability(epsilon: float, categories: int) -> float:
    """e^ε / (e^ε + L − 1): the chance that ε-randomized response over L categories tells the truth."""
    if categories < 1:
        raise ValueError(f"randomized response needs at least 1 category, got {categories}")
    if not epsilon >= 0.0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    return 1.0 / (1.0 + (categories - 1) * math.exp(-epsilon))


def _release(value: np.ndarray, scale: float, noisy: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """`noisy` applied to value as a flat float64 vector, in value's shape; scale 0 is an exact copy."""
    if scale < 0.0:
        raise ValueError(f"noise scale must be >= 0, got {scale}")
    flat = np.asarray(value, dtype=np.float64).ravel()
    released = flat.copy() if scale == 0.0 else np.asarray(noisy(flat), dtype=np.float64)
    return released.reshape(np.shape(value))


def _keep_probability_for(value: int, categories: int, epsilon: float) -> float:
    """The keep probability, once the value is known to be one of the categories."""
    keep = keep_probability(epsilon, categories)
    if not 0 <= value < categories:
        raise ValueError(f"category {value} is not in 0..{categories - 1}")
    return keep


@functools.cache
def _opendp() -> SimpleNamespace:
    """The parts of OpenDP the mechanisms below use, with the 'contrib' features they need (set up once per
    process). Not its prelude: that also imports its scikit-learn, pandas and polars extras, some hundred
    megabytes a node process never uses."""
    import opendp.domains as domains
    import opendp.measurements as measurements
    import opendp.metrics as metrics
    import opendp.mod as mod

    mod.enable_features("contrib")
    return SimpleNamespace(vector_domain=domains.vector_domain, atom_domain=domains.atom_domain,
                           l1_distance=metrics.l1_distance, l2_distance=metrics.l2_distance, m=measurements)


class SecureGaussianSampler:
    """CSPRNG-backed exact discrete Gaussian via OpenDP (floating-point safe)."""

    kind: SamplerKind = "secure"

    def __init__(self) -> None:
        self._dp = _opendp()

    def _measurement(self, dimension: int, sigma: float) -> Any:  # an opendp Measurement (its `map` is untyped)
        dp = self._dp
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), dimension)
        return dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=sigma)

    def perturb(self, value: np.ndarray, sigma: float) -> np.ndarray:
        return _release(value, sigma, lambda flat: self._measurement(flat.size, sigma)(flat.tolist()))

    def effective_sensitivity(self, sensitivity: float, sigma: float) -> float:
        if sigma == 0.0:
            return sensitivity
        rho = self._measurement(1, sigma).map(sensitivity)  # zCDP: rho = Δ_eff² / (2σ²)
        return max(sensitivity, sigma * math.sqrt(2.0 * float(rho)))


class SecureLaplaceSampler:
    """CSPRNG-backed exact discrete Laplace via OpenDP (floating-point safe)."""

    kind: SamplerKind = "secure"

    def __init__(self) -> None:
        self._dp = _opendp()

    def _measurement(self, dimension: int, scale: float) -> Any:  # an opendp Measurement
        dp = self._dp
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), dimension)
        return dp.m.make_laplace(domain, dp.l1_distance(T=float), scale=scale)

    def perturb(self, value: np.ndarray, scale: float) -> np.ndarray:
        return _release(value, scale, lambda flat: self._measurement(flat.size, scale)(flat.tolist()))

    def effective_sensitivity(self, sensitivity: float, scale: float) -> float:
        if scale == 0.0:
            return sensitivity
        epsilon = self._measurement(1, scale).map(sensitivity)  # pure DP: ε = Δ_eff / b
        return max(sensitivity, scale * float(epsilon))


class SecureRandomizedResponse:
    """Randomized response via OpenDP: exact Bernoulli and uniform draws from a CSPRNG."""

    kind: SamplerKind = "secure"

    def __init__(self) -> None:
        self._dp = _opendp()

    def respond(self, value: int, categories: int, epsilon: float) -> int:
        keep = _keep_probability_for(value, categories, epsilon)
        if keep == 1.0:
            return value
        return int(self._dp.m.make_randomized_response(list(range(categories)), keep, T=int)(value))


class SimulationSampler:
    """Seeded numpy Gaussian noise: reproducible, fast, not for real privacy claims."""

    kind: SamplerKind = "simulation"

    def __init__(self, seed: int | np.random.SeedSequence | None) -> None:
        self._rng = np.random.default_rng(seed)

    def perturb(self, value: np.ndarray, sigma: float) -> np.ndarray:
        return _release(value, sigma, lambda flat: flat + self._rng.normal(0.0, sigma, size=flat.size))

    def effective_sensitivity(self, sensitivity: float, sigma: float) -> float:
        return sensitivity


class SimulationLaplaceSampler:
    """Seeded numpy Laplace noise: reproducible, fast, not for real privacy claims."""

    kind: SamplerKind = "simulation"

    def __init__(self, seed: int | np.random.SeedSequence | None) -> None:
        self._rng = np.random.default_rng(seed)

    def perturb(self, value: np.ndarray, scale: float) -> np.ndarray:
        return _release(value, scale, lambda flat: flat + self._rng.laplace(0.0, scale, size=flat.size))

    def effective_sensitivity(self, sensitivity: float, scale: float) -> float:
        return sensitivity


class SimulationRandomizedResponse:
    """Seeded numpy randomized response: reproducible, fast, not for real privacy claims."""

    kind: SamplerKind = "simulation"

    def __init__(self, seed: int | np.random.SeedSequence | None) -> None:
        self._rng = np.random.default_rng(seed)

    def respond(self, value: int, categories: int, epsilon: float) -> int:
        keep = _keep_probability_for(value, categories, epsilon)
        if self._rng.random() < keep:
            return value
        other = int(self._rng.integers(categories - 1))  # uniform over the L - 1 other categories
        return other if other < value else other + 1


class FairCoins(Protocol):
    kind: SamplerKind

    def flip(self, count: int) -> np.ndarray:
        """`count` independent fair signs, each -1.0 or +1.0."""
        ...


class SecureCoins:
    """Fair signs from the OS CSPRNG: nobody but the node can predict them."""

    kind: SamplerKind = "secure"

    def flip(self, count: int) -> np.ndarray:
        bits = np.unpackbits(np.frombuffer(secrets.token_bytes((count + 7) // 8), dtype=np.uint8))[:count]
        return np.where(bits == 1, 1.0, -1.0)


class SimulationCoins:
    """Seeded fair signs: reproducible experiments only."""

    kind: SamplerKind = "simulation"

    def __init__(self, seed: int | np.random.SeedSequence | None) -> None:
        self._rng = np.random.default_rng(seed)

    def flip(self, count: int) -> np.ndarray:
        return np.where(self._rng.random(count) < 0.5, -1.0, 1.0)


@dataclass(frozen=True)
class NodeSamplers:
    """A node's randomness: one sampler per mechanism, and its fair coins (canaries), all of the same kind."""

    kind: SamplerKind
    gaussian: GaussianSampler
    laplace: LaplaceSampler
    randomized_response: RandomizedResponseSampler
    coins: FairCoins


def make_samplers(kind: SamplerKind, seed: int | None = None) -> NodeSamplers:
    """Every sampler a node runs with; a seed is only meaningful for the simulation kind.

    In simulation the Gaussian sampler draws from the seed's own stream (as `make_sampler`
    does) and the others (the coins too) from streams spawned from it, so using one mechanism
    never shifts another's draws.
    """
    if kind == "secure":
        if seed is not None:
            raise ValueError("the secure sampler takes no seed")
        return NodeSamplers(kind, SecureGaussianSampler(), SecureLaplaceSampler(), SecureRandomizedResponse(),
                            SecureCoins())
    if kind != "simulation":
        raise ValueError(f"unknown sampler kind {kind!r}; choose 'secure' or 'simulation'")
    root = np.random.SeedSequence(seed)
    laplace, randomized_response, coins = root.spawn(3)
    return NodeSamplers(kind, SimulationSampler(root), SimulationLaplaceSampler(laplace),
                        SimulationRandomizedResponse(randomized_response), SimulationCoins(coins))


def make_sampler(kind: SamplerKind, seed: int | None = None) -> GaussianSampler:
    """The Gaussian sampler a node runs with; a seed is only meaningful for the simulation sampler."""
    return make_samplers(kind, seed).gaussian


def node_seed(master_seed: int, node_id: int) -> int:
    """Node `node_id`'s simulation seed derived from a run's master seed: one stream per id, whoever hosts it."""
    return int(np.random.SeedSequence([master_seed, node_id]).generate_state(1)[0])
