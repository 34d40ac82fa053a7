"""(ε, δ) conversions pinned to dp-accounting, and the baselines' hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from coordinator_tools.audit.baselines import central_dp, local_dp
from coordinator_tools.audit.conversion import (
    ORDERS,
    classic_epsilon,
    closed_form_epsilon,
    closed_form_mixture_epsilon,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mixture_epsilon,
    gaussian_rdp_epsilon,
    mixture_rdp,
    rdp_to_epsilon,
    squared_mu,
)

MUS = np.array([1e-4, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 20.0])


@pytest.mark.parametrize("delta", [1e-9, 1e-5, 1e-2, 0.3])
def test_tight_rdp_conversion_equals_dp_accounting_on_random_curves(delta):
    rng = np.random.default_rng(17)
    orders = np.concatenate([[1.0, 1.005], np.sort(rng.uniform(1.0, 300.0, size=40))])
    scale = 10.0 ** rng.uniform(-8, 2, size=(300, 1))
    curves = scale * rng.exponential(size=(300, orders.size))
    curves[:20] = 0.0
    curves[20:40, ::3] = np.inf
    ours = rdp_to_epsilon(orders, curves, delta)
    theirs = np.array([compute_epsilon(orders, curve, delta)[0] for curve in curves])
    assert np.allclose(ours, theirs, rtol=1e-12, atol=0)


def test_negative_divergence_is_refused_and_nan_passes_through():
    with pytest.raises(ValueError, match="negative"):
        rdp_to_epsilon([2.0, 3.0], [0.1, -1e-12], 1e-5)
    with pytest.raises(ValueError, match="negative"):
        classic_epsilon([0.1, -0.2], 2.0, 1e-5)
    assert np.isnan(rdp_to_epsilon([2.0, 3.0], [[np.nan, np.nan], [0.1, 0.2]], 1e-5)[0])


def test_exact_gaussian_delta_matches_dp_accounting():
    for mu in MUS[MUS >= 0.01]:
        reference = GaussianPrivacyLoss(standard_deviation=1 / mu, sensitivity=1.0)
        for eps in (0.0, 0.1, 1.0, 3.0, 10.0):
            assert gaussian_delta(mu, eps) == pytest.approx(reference.get_delta_for_epsilon(eps), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("delta", [1e-10, 1e-5, 0.05])
def test_gaussian_epsilon_is_the_smallest_epsilon_at_delta(delta):
    eps = gaussian_epsilon(MUS, delta)
    positive = eps > 0
    assert np.allclose(gaussian_delta(MUS[positive], eps[positive]), delta, rtol=1e-8)
    assert (gaussian_delta(MUS[positive], eps[positive] * (1 - 1e-6)) > delta).all()
    assert (gaussian_delta(MUS[~positive], 0.0) <= delta).all()


def test_gaussian_epsilon_matches_the_privacy_loss_distribution():
    for mu in (0.3, 0.7, 1.5, 4.0):
        pld = privacy_loss_distribution.from_gaussian_mechanism(standard_deviation=1 / mu)
        assert gaussian_epsilon(mu, 1e-5) == pytest.approx(pld.get_epsilon_for_delta(1e-5), abs=1e-3)


def test_gaussian_epsilon_edges():
    assert np.array_equal(gaussian_epsilon([0.0, np.inf, np.nan], 1e-5), [0.0, np.inf, np.nan], equal_nan=True)
    assert gaussian_epsilon(1e-6, 1e-5) == 0.0  # δ(0) = 2Φ(μ/2) - 1 is already below δ


def test_exact_is_at_most_tight_rdp_is_at_most_classic():
    alpha, delta = 8.0, 1e-6
    exact = gaussian_epsilon(MUS, delta)
    tight = gaussian_rdp_epsilon(MUS, delta, alpha=alpha, conversion="tight")
    classic = gaussian_rdp_epsilon(MUS, delta, alpha=alpha, conversion="paper")
    assert (exact <= tight + 1e-12).all() and (tight <= classic + 1e-12).all()
    single = np.array([compute_epsilon(ORDERS, ORDERS * mu**2 / 2, delta)[0] for mu in MUS])
    assert np.allclose(tight, single, rtol=1e-12)


def test_classic_conversion_by_hand():
    assert classic_epsilon(0.5, 2.0, math.exp(-3)) == pytest.approx(3.5, rel=1e-15)


def test_squared_mu_without_noise():
    assert np.array_equal(squared_mu([0.0, 0.25, 1.0], sigma=0.0, sensitivity=1.0), [0.0, np.inf, np.inf])
    assert np.allclose(squared_mu([0.0, 0.25, 1.0], sigma=2.0, sensitivity=3.0), [0.0, 0.5625, 2.25])


def test_baselines_by_hand():
    ldp = local_dp(sigma=2.0, sensitivity=1.0, alpha=2.0, delta=1e-5)
    central = central_dp(n=4, sigma=2.0, sensitivity=1.0, alpha=2.0, delta=1e-5)
    assert (ldp.mu, ldp.rdp) == (0.5, 0.25)
    assert (central.mu, central.rdp) == (0.25, 0.0625)
    assert ldp.eps == gaussian_epsilon(0.5, 1e-5) and central.eps == gaussian_epsilon(0.25, 1e-5)
    assert central.eps < ldp.eps


def test_a_mixture_of_identical_components_is_the_component():
    mu = np.array([0.0, 0.3, 1.0, 4.0])
    stacked = np.stack([mu, mu, mu])
    assert np.allclose(gaussian_mixture_epsilon(stacked, 1e-5), gaussian_epsilon(mu, 1e-5), rtol=1e-10, atol=0)
    rdp = 2.0 * mu**2 / 2
    assert np.allclose(mixture_rdp(np.stack([rdp, rdp]), 2.0), rdp, rtol=1e-14)
    for conversion in ("tight", "paper"):
        assert np.allclose(closed_form_mixture_epsilon(stacked, 1e-5, alpha=2.0, conversion=conversion),
                           closed_form_epsilon(mu, 1e-5, alpha=2.0, conversion=conversion), rtol=1e-10)


def test_a_mixtures_epsilon_meets_delta_on_average_and_lies_between_its_components():
    mu = np.array([[0.5, 2.0], [3.0, 0.0], [1.0, 8.0]])  # 3 schedules x 2 pairs
    eps = gaussian_mixture_epsilon(mu, 1e-4)
    per_component = gaussian_epsilon(mu, 1e-4)
    assert ((eps >= per_component.min(axis=0)) & (eps <= per_component.max(axis=0))).all()
    for pair in range(2):
        components = mu[:, pair][mu[:, pair] > 0]
        average = gaussian_delta(components, eps[pair]).sum() / 3
        assert average == pytest.approx(1e-4, rel=1e-8)
    assert mixture_rdp(np.array([[1.0], [3.0]]), 2.0)[0] == pytest.approx(np.log((np.e + np.e**3) / 2), rel=1e-14)
    assert np.isinf(gaussian_mixture_epsilon(np.array([[1.0], [np.inf]]), 1e-5)).all()
