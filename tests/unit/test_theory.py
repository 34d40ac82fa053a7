"""Muffliato theory: T_stop and the utility bound by value, and the bound holding on real gossip."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coordinator_tools.theory import (
    muffliato_mse_bound,
    muffliato_t_stop,
    randomized_muffliato_mse_bound,
    randomized_muffliato_t_stop,
    worst_case_spread,
)
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.mixing import accelerated_step, chebyshev_omega
from node.protocols.muffliato import MuffliatoParams


def test_t_stop_follows_theorem_2() -> None:
    # ln((16 / 1) * max(1, 4)) = ln 64; accelerated divides by sqrt(0.25), plain by 0.25.
    assert muffliato_t_stop(16, 0.25, 1.0, 4.0) == math.ceil(math.log(64) / 0.5) == 9
    assert muffliato_t_stop(16, 0.25, 1.0, 4.0, accelerated=False) == math.ceil(math.log(64) / 0.25) == 17


def test_t_stop_uses_the_noise_when_the_data_spread_is_smaller() -> None:
    assert muffliato_t_stop(16, 1.0, 2.0, 0.1) == math.ceil(math.log(16)) == 3
    assert muffliato_t_stop(2, 1.0, 1.0, 0.0) == 1


def test_t_stop_grows_as_the_gap_shrinks_and_the_spread_grows() -> None:
    assert muffliato_t_stop(64, 0.01, 1.0, 1.0) > muffliato_t_stop(64, 0.1, 1.0, 1.0)
    assert muffliato_t_stop(64, 0.1, 0.1, 1.0) > muffliato_t_stop(64, 0.1, 1.0, 1.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((16, 0.5, 0.0, 1.0), "pass the number of rounds explicitly"),
        ((16, 0.5, -1.0, 1.0), "cannot be negative"),
        ((16, 0.0, 1.0, 1.0), "spectral gap"),
        ((16, 1.5, 1.0, 1.0), "spectral gap"),
        ((1, 0.5, 1.0, 1.0), "n >= 2"),
        ((16, 0.5, 1.0, -1.0), "spread"),
    ],
)
def test_t_stop_refuses_impossible_inputs(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        muffliato_t_stop(*args)


def test_mse_bound_is_three_sigma_squared_over_n() -> None:
    assert muffliato_mse_bound(10, 2.0) == pytest.approx(1.2)
    assert muffliato_mse_bound(10, 0.0) == 0.0


def test_worst_case_spread_bounds_every_clipped_input_and_is_reached() -> None:
    sensitivity = 3.0
    bound = worst_case_spread(sensitivity)
    assert bound == 2.25
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = rng.normal(size=(9, 4)) * rng.exponential(size=(9, 1))
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x * np.minimum(1.0, (sensitivity / 2) / norms)
        assert np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1)) <= bound + 1e-12
    antipodes = np.array([[1.5, 0.0], [-1.5, 0.0]] * 5)
    assert np.mean(np.sum((antipodes - antipodes.mean(axis=0)) ** 2, axis=1)) == pytest.approx(bound)
    with pytest.raises(ValueError, match="sensitivity"):
        worst_case_spread(0.0)


def noisy_gossip_mse(kind: str, n: int, rounds: int | None, accelerated: bool, trials: int = 2000) -> tuple[float, int]:
    """Mean over trials of (1/n) sum_v (x_v^T - x_bar)^2 for worst-case inputs +-1/2 and sigma = 1."""
    protocol = MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=1, dimension=1)
    topology = build_topology(generate(kind, n=n), graph_name=kind, run_id="theory", protocol=protocol)
    if rounds is None:
        rounds = muffliato_t_stop(n, topology.spectral_gap, 1.0, worst_case_spread(1.0), accelerated=accelerated)
    matrix = topology.gossip_matrix()
    omega = chebyshev_omega(topology.spectral_gap)
    x = np.where(np.arange(n) % 2 == 0, 0.5, -0.5)[:, None] * np.ones((1, trials))
    noisy = x + np.random.default_rng(1).normal(size=x.shape)
    previous, current = noisy, matrix @ noisy
    for _ in range(rounds - 1):
        mixed = matrix @ current
        previous, current = current, accelerated_step(previous, mixed, omega) if accelerated else mixed
    return float(np.mean((current - x.mean(axis=0)) ** 2)), rounds


@pytest.mark.parametrize(("kind", "n"), [("hypercube", 32), ("ring", 16), ("grid", 25)])
@pytest.mark.parametrize("accelerated", [True, False])
def test_gossip_run_for_t_stop_rounds_meets_the_bound(kind: str, n: int, accelerated: bool) -> None:
    mse, rounds = noisy_gossip_mse(kind, n, None, accelerated)
    assert mse <= muffliato_mse_bound(n, 1.0)
    if rounds > 1:
        early, _ = noisy_gossip_mse(kind, n, 1, accelerated)
        assert early > muffliato_mse_bound(n, 1.0)


def test_randomized_muffliato_stops_n_over_twice_the_gap_times_the_log_and_bounds_4_sigma2_over_n():
    # hypercube of 8 (Metropolis): lambda_W = 1/2, so lambda(p) = 2 lambda_W / n = 1/8
    assert randomized_muffliato_t_stop(8, 0.5, 1.0, 0.25) == math.ceil(8 * math.log(8))
    assert randomized_muffliato_mse_bound(8, 2.0) == pytest.approx(2.0)
