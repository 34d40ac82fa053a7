"""Ring histogram (PAbD Alg. 2): Thm 2's calibration, the debiased estimator, the node's input and CLI paths."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coordinator_tools.cli import main
from coordinator_tools.datasets import synthetic_categories
from node.errors import ConfigError
from node.protocols.ring_histogram import (
    RingHistogramParams,
    calibrate_gamma,
    debiased,
    initial_elements,
    load_category,
    rr_epsilon,
    thm2_conditions,
    thm2_gamma,
)


def test_thm2_gamma_is_the_stated_formula_checked_by_hand() -> None:
    # n = 2000, eps = 0.3, delta = 1e-5, L = 3: 12 * 0.3 * sqrt(ln(1e5) / 2000) = 3.6 * 0.0758715 = 0.2731375,
    # gamma = 3 / (e^0.2731375 + 2) = 3 / 3.3140812 = 0.905228
    assert thm2_gamma(2000, 0.3, 1e-5, 3) == pytest.approx(0.905228, abs=2e-6)
    assert calibrate_gamma(2000, 3, 0.3, 1e-5) == thm2_gamma(2000, 0.3, 1e-5, 3)
    # RR_gamma at that gamma is eps0-LDP: ln(1 + L (1 - gamma) / gamma) = 12 eps sqrt(ln(1/delta) / n)
    eps0 = 12 * 0.3 * math.sqrt(math.log(1e5) / 2000)
    assert rr_epsilon(thm2_gamma(2000, 0.3, 1e-5, 3), 3) == pytest.approx(eps0, rel=1e-12)
    assert all(condition.holds for condition in thm2_conditions(2000, 0.3, 1e-5))


def test_a_target_thm2_cannot_promise_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"n > 1000 fails \(n = 8\)") as refused:
        calibrate_gamma(8, 3, 0.3, 1e-5)
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="epsilon < 1/2 fails"):
        calibrate_gamma(5000, 3, 0.6, 1e-5)
    with pytest.raises(ConfigError, match="delta in"):
        calibrate_gamma(5000, 3, 0.3, 0.0)
    failing = {c.name for c in thm2_conditions(1001, 0.45, 1e-10) if not c.holds}
    assert failing == {"eps0 = 12 eps sqrt(ln(1/delta)/n) < 1/2 (shuffling, Erlingsson et al. Cor. 9)"}


def test_rr_epsilon_and_initial_elements() -> None:
    assert rr_epsilon(0.0, 4) == math.inf and rr_epsilon(1.0, 4) == 0.0
    assert rr_epsilon(0.5, 2) == pytest.approx(math.log(3.0))
    assert initial_elements(0.3, 10) == 3  # 0.3 * 10 is 3.0000000000000004 in floating point
    assert initial_elements(0.31, 10) == 4 and initial_elements(0.0, 10) == 0


def test_the_debiased_estimate_is_unbiased_over_simulated_runs() -> None:
    """Alg. 2 simulated in-process: m uniform elements, then K rounds of RR_gamma answers of every node."""
    rng = np.random.default_rng(11)
    n, categories, cycles, gamma, runs = 8, 3, 2, 0.4, 20000
    inputs = np.array([0, 0, 0, 1, 1, 2, 0, 1])
    truth = np.bincount(inputs, minlength=categories)
    m = initial_elements(gamma, n)
    answers = np.where(rng.random((runs, cycles, n)) < gamma, rng.integers(categories, size=(runs, cycles, n)),
                       inputs)
    tokens = np.stack([np.bincount(a.ravel(), minlength=categories) for a in answers]).astype(float)
    tokens += np.stack([np.bincount(rng.integers(categories, size=m), minlength=categories) for _ in range(runs)])
    estimates = np.stack([debiased(token, gamma=gamma, n=n, cycles=cycles) for token in tokens])
    np.testing.assert_allclose(estimates.sum(axis=1), n)  # the estimates always sum to n
    standard_error = estimates.std(axis=0) / math.sqrt(runs)
    assert np.all(np.abs(estimates.mean(axis=0) - truth) < 4 * standard_error), (estimates.mean(axis=0), truth)
    assert np.all(standard_error > 0)


def test_gamma_zero_debiases_to_the_exact_histogram() -> None:
    token = np.array([6.0, 2.0, 8.0])  # K = 2 cycles of 8 nodes: 3, 1, 4 nodes per category
    np.testing.assert_array_equal(debiased(token, gamma=0.0, n=8, cycles=2), [3.0, 1.0, 4.0])


def test_a_node_input_is_one_category(tmp_path) -> None:
    params = RingHistogramParams(categories=3, gamma=0.2)
    for name, content, expected in [("a.json", '{"value": [2]}', 2), ("b.json", "1", 1)]:
        (tmp_path / name).write_text(content)
        assert load_category(tmp_path / name, params) == expected
    for content, message in [('{"value": [3]}', r"holds 3; .* integer in 0\.\.2"),
                             ('{"value": [0.5]}', "holds 0.5"), ('{"value": [1, 2]}', "holds 2 values")]:
        (tmp_path / "bad.json").write_text(content)
        with pytest.raises(ConfigError, match=message):
            load_category(tmp_path / "bad.json", params)


def test_params_need_a_complete_target() -> None:
    with pytest.raises(ValueError, match="both target_epsilon and target_delta"):
        RingHistogramParams(categories=3, gamma=0.2, target_epsilon=0.3)
    params = RingHistogramParams(categories=4, gamma=0.2)
    assert (params.dimension, params.sigma, params.sensitivity) == (4, 0.2, 1.0)


def test_topology_and_data_commands(tmp_path, capsys) -> None:
    topology = tmp_path / "t.json"
    assert main(["topology", "generate", "ring", "--n", "6", "--protocol", "ring-histogram", "--categories", "4",
                 "--gamma", "0.25", "--cycles", "2", "--out", str(topology)]) == 0
    protocol = json.loads(topology.read_text())["protocol"]
    assert protocol == {"name": "ring-histogram", "categories": 4, "cycles": 2, "gamma": 0.25,
                        "target_epsilon": None, "target_delta": None, "alpha": 2.0}
    assert main(["data", "generate", str(topology), "--out", str(tmp_path / "data"), "--seed", "3"]) == 0
    values = [json.loads((tmp_path / "data" / f"node-{v}.json").read_text())["value"] for v in range(6)]
    assert all(len(value) == 1 and value[0] in (0.0, 1.0, 2.0, 3.0) for value in values)
    np.testing.assert_array_equal(np.ravel(values), synthetic_categories(6, 4, 3).ravel())
    assert main(["topology", "generate", "ring", "--n", "6", "--protocol", "ring-histogram", "--categories", "4",
                 "--target-epsilon", "0.3", "--target-delta", "1e-5", "--out", str(tmp_path / "u.json")]) != 0
    assert "n > 1000 fails" in capsys.readouterr().err
