"""Noise samplers: the right distributions, reproducible only in simulation, and no seed anywhere."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from node.noise import (
    NodeSamplers,
    SecureGaussianSampler,
    SimulationSampler,
    keep_probability,
    make_sampler,
    make_samplers,
)

KINDS = ("secure", "simulation")
DRAWS = 20_000  # one vector of this length per mechanism: the secure samplers are slow per call
RR_DRAWS = 4_000  # randomized response is one call per draw


def samplers(kind: str) -> NodeSamplers:
    return make_samplers(kind, seed=None if kind == "secure" else 2024)


@pytest.mark.parametrize("kind", KINDS)
def test_gaussian_noise_has_mean_zero_and_variance_sigma_squared(kind: str) -> None:
    sigma, value = 2.0, np.full(DRAWS, 3.0)
    noise = samplers(kind).gaussian.perturb(value, sigma) - value
    assert abs(noise.mean()) < 5 * sigma / math.sqrt(DRAWS)
    assert noise.var() == pytest.approx(sigma**2, abs=5 * sigma**2 * math.sqrt(2 / DRAWS))


@pytest.mark.parametrize("kind", KINDS)
def test_laplace_noise_has_mean_zero_and_variance_two_scale_squared(kind: str) -> None:
    scale, value = 0.5, np.full(DRAWS, -1.0)
    noise = samplers(kind).laplace.perturb(value, scale) - value
    assert abs(noise.mean()) < 5 * math.sqrt(2) * scale / math.sqrt(DRAWS)
    # the sample variance of Laplace(b) has std b² sqrt(20 / N) (fourth moment 24 b⁴)
    assert noise.var() == pytest.approx(2 * scale**2, abs=5 * scale**2 * math.sqrt(20 / DRAWS))
    assert np.mean(np.abs(noise)) == pytest.approx(scale, rel=0.05)  # E|X| = b tells Laplace from a Gaussian


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("epsilon", "categories"), [(1.0, 4), (0.3, 2), (2.5, 6)])
def test_randomized_response_keeps_the_value_with_probability_e_eps_over_e_eps_plus_l_minus_1(
    kind: str, epsilon: float, categories: int
) -> None:
    keep = math.exp(epsilon) / (math.exp(epsilon) + categories - 1)
    assert keep_probability(epsilon, categories) == pytest.approx(keep)
    sampler = samplers(kind).randomized_response
    value = categories // 2
    answers = Counter(sampler.respond(value, categories, epsilon) for _ in range(RR_DRAWS))
    assert set(answers) <= set(range(categories))
    tolerance = 5 * math.sqrt(keep * (1 - keep) / RR_DRAWS)
    assert answers[value] / RR_DRAWS == pytest.approx(keep, abs=tolerance)
    other = (1 - keep) / (categories - 1)
    for category in set(range(categories)) - {value}:
        assert answers[category] / RR_DRAWS == pytest.approx(other, abs=5 * math.sqrt(other * (1 - other) / RR_DRAWS))


def test_simulation_is_reproducible_from_its_seed_and_each_mechanism_has_its_own_stream() -> None:
    def draws(samplers: NodeSamplers, laplace_first: bool) -> tuple[np.ndarray, np.ndarray, list[int]]:
        laplace = samplers.laplace.perturb(np.zeros(5), 1.0) if laplace_first else None
        gaussian = samplers.gaussian.perturb(np.zeros(5), 1.0)
        laplace = samplers.laplace.perturb(np.zeros(5), 1.0) if laplace is None else laplace
        return gaussian, laplace, [samplers.randomized_response.respond(0, 10, 0.1) for _ in range(20)]

    first = draws(make_samplers("simulation", 7), laplace_first=False)
    again = draws(make_samplers("simulation", 7), laplace_first=True)
    other = draws(make_samplers("simulation", 8), laplace_first=False)
    for a, b, c in zip(first, again, other):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


def test_make_sampler_keeps_its_gaussian_stream() -> None:
    """Experiments seeded before the bundle existed still draw the same noise."""
    sampler = make_sampler("simulation", 5)
    assert isinstance(sampler, SimulationSampler)
    np.testing.assert_array_equal(sampler.perturb(np.zeros((2, 3)), 2.0), np.random.default_rng(5).normal(0, 2, (2, 3)))
    np.testing.assert_array_equal(make_samplers("simulation", 5).gaussian.perturb(np.zeros(6), 2.0),
                                  np.random.default_rng(5).normal(0, 2, 6))
    assert isinstance(make_sampler("secure"), SecureGaussianSampler)


def test_secure_draws_cannot_be_repeated_or_seeded() -> None:
    first, second = make_samplers("secure"), make_samplers("secure")
    assert not np.array_equal(first.gaussian.perturb(np.zeros(8), 1.0), second.gaussian.perturb(np.zeros(8), 1.0))
    assert not np.array_equal(first.laplace.perturb(np.zeros(8), 1.0), first.laplace.perturb(np.zeros(8), 1.0))
    with pytest.raises(ValueError, match="takes no seed"):
        make_samplers("secure", seed=1)
    with pytest.raises(ValueError, match="unknown sampler kind"):
        make_samplers("exact", seed=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_no_seed_is_kept_where_it_could_be_read(kind: str) -> None:
    seed = None if kind == "secure" else 918_273_645
    bundle = make_samplers(kind, seed)
    assert bundle.kind == kind
    assert {bundle.gaussian.kind, bundle.laplace.kind, bundle.randomized_response.kind} == {kind}
    assert "918273645" not in repr(bundle)
    for sampler in (bundle.gaussian, bundle.laplace, bundle.randomized_response):
        assert "seed" not in " ".join(vars(sampler)).lower()
        assert "918273645" not in repr(sampler)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_noise_is_an_exact_copy_and_infinite_epsilon_tells_the_truth(kind: str) -> None:
    bundle = samplers(kind)
    value = np.array([[0.1, -2.5e300], [np.pi, 7.0]])
    for mechanism in (bundle.gaussian, bundle.laplace):
        released = mechanism.perturb(value, 0.0)
        np.testing.assert_array_equal(released, value)
        assert released is not value and released.shape == value.shape
        assert mechanism.effective_sensitivity(1.5, 0.0) == 1.5
    assert {bundle.randomized_response.respond(3, 5, math.inf) for _ in range(50)} == {3}
    assert bundle.randomized_response.respond(0, 1, 0.5) == 0  # a single category has nothing to hide
    assert keep_probability(0.0, 4) == 0.25 and keep_probability(math.inf, 4) == 1.0
    assert keep_probability(1e6, 3) == 1.0  # no overflow for a huge epsilon


@pytest.mark.parametrize("kind", KINDS)
def test_noise_keeps_the_shape_and_bad_arguments_are_refused(kind: str) -> None:
    bundle = samplers(kind)
    assert bundle.gaussian.perturb(np.zeros((3, 2)), 1.0).shape == (3, 2)
    assert bundle.laplace.perturb(np.zeros((3, 2)), 1.0).shape == (3, 2)
    with pytest.raises(ValueError, match="noise scale must be >= 0"):
        bundle.laplace.perturb(np.zeros(2), -1.0)
    with pytest.raises(ValueError, match=r"category 4 is not in 0\.\.3"):
        bundle.randomized_response.respond(4, 4, 1.0)
    with pytest.raises(ValueError, match="epsilon must be >= 0"):
        bundle.randomized_response.respond(1, 4, -1.0)
    with pytest.raises(ValueError, match="at least 1 category"):
        bundle.randomized_response.respond(0, 0, 1.0)


def test_the_secure_grid_never_lowers_the_sensitivity_and_simulation_has_none() -> None:
    secure, simulation = make_samplers("secure"), make_samplers("simulation", 1)
    assert secure.gaussian.effective_sensitivity(1.0, 0.5) >= 1.0
    assert secure.laplace.effective_sensitivity(1.0, 0.5) >= 1.0
    assert simulation.gaussian.effective_sensitivity(1.0, 0.5) == 1.0
    assert simulation.laplace.effective_sensitivity(1.0, 0.5) == 1.0
