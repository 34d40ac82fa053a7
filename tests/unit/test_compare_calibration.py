"""`netdp compare`'s calibration: σ from plans meets the target mean ε, on an 8-node graph, no cluster."""

from __future__ import annotations

import pytest

from coordinator_tools.compare.calibrate import EPS_RTOL, PlannedMean, calibrate, smallest_sigma
from coordinator_tools.compare.setup import PROTOCOLS, CompareSetup

SETUP = CompareSetup(graph="hypercube", n=8, steps_per_node=3)
TARGET = 1.0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_calibrated_sigma_meets_the_target_and_more_noise_lowers_the_mean(protocol: str) -> None:
    calibration = calibrate(SETUP, protocol, TARGET)
    assert TARGET * (1 - EPS_RTOL) <= calibration.planned_mean_eps <= TARGET
    assert calibration.evaluations >= 2
    mean = PlannedMean(SETUP, protocol)  # the walk's ex-ante column drawn as its audit draws it
    at_sigma = mean(calibration.sigma, calibration.alpha)
    assert at_sigma == pytest.approx(calibration.planned_mean_eps, rel=1e-9)
    assert mean(1.5 * calibration.sigma, calibration.alpha) < at_sigma
    assert mean(0.8 * calibration.sigma, calibration.alpha) > TARGET


def test_search_brackets_from_either_side() -> None:
    def loss(sigma: float) -> float:
        return 3.0 / sigma**2

    for start in (0.01, 100.0):
        sigma, value = smallest_sigma(loss, 1.0, start)
        assert 1.0 - EPS_RTOL <= value <= 1.0
        assert sigma == pytest.approx(3.0**0.5, rel=EPS_RTOL)
