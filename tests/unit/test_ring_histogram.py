"""Ring histogram (PAbD Alg. 2): Thm 2 by its proof and gamma's calibration, the debiased estimator, the node's
input and CLI paths."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.token_sum.paper import paper_bound
from coordinator_tools.audit.protocols.token_sum.run import planned_ring
from coordinator_tools.cli import main
from coordinator_tools.dataprep.datasets import synthetic_categories
from node.errors import ConfigError
from node.protocols.ring_histogram import (
    RingHistogramParams,
    calibrate_gamma,
    debiased,
    initial_elements,
    load_category,
    rr_epsilon,
)
from node.protocols.ring_histogram_bound import proof_bound, stated_window_epsilon, window_epsilon
from node.topology import load_topology


def composed_by_hand(local_epsilon: float, n: int, cycles: int, delta: float, share: float) -> float:
    """Thm 2's proof at one split: Cor. 9 per window at delta_w = (1 - share) delta / K, advanced composition at
    delta' = share delta."""
    window_delta, delta_prime = (1 - share) * delta / cycles, share * delta
    eps = 12 * local_epsilon * math.sqrt(math.log(1 / window_delta) / n)
    return math.sqrt(2 * cycles * math.log(1 / delta_prime)) * eps + cycles * eps * math.expm1(eps)


def best_split_by_hand(local_epsilon: float, n: int, cycles: int, delta: float) -> tuple[float, float]:
    """(min over the split, the share delta'/delta there), by golden-section search on ln(share / (1 - share))."""
    def value(x: float) -> float:
        return composed_by_hand(local_epsilon, n, cycles, delta, 1 / (1 + math.exp(-x)))
    low, high, ratio = -30.0, 30.0, (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        low, high = (low, b) if value(a) < value(b) else (a, high)
    x = (low + high) / 2
    return value(x), 1 / (1 + math.exp(-x))


def test_the_statement_swaps_cor9s_epsilons_as_the_issue_measured() -> None:
    """n = 1001, eps = 0.3, delta = 1e-6, L = 3: the statement's gamma makes RR_gamma eps0 = 12 * 0.3 *
    sqrt(ln(1e6) / 1001) = 0.42293-LDP (gamma = 3 / (e^eps0 + 2) = 0.8507); Cor. 9 at that eps0 gives each window
    12 eps0 sqrt(ln(1e6) / 1001) = 144 * 0.3 * ln(1e6) / 1001 = 0.5962, twice the 0.3 the statement promises."""
    eps0 = 12 * 0.3 * math.sqrt(math.log(1e6) / 1001)
    gamma = 3 / (math.exp(eps0) + 2)
    assert gamma == pytest.approx(0.8507, abs=1e-4) and rr_epsilon(gamma, 3) == pytest.approx(eps0, rel=1e-12)
    assert window_epsilon(eps0, n=1001, window_delta=1e-6) == pytest.approx(144 * 0.3 * math.log(1e6) / 1001)
    assert window_epsilon(eps0, n=1001, window_delta=1e-6) == pytest.approx(0.5962, abs=1e-4)
    assert stated_window_epsilon(eps0, n=1001, window_delta=1e-6) == pytest.approx(0.3, rel=1e-12)


def test_the_proofs_composed_bound_has_a_real_optimum() -> None:
    """K = 2 windows at delta = 1e-5 for that eps0: the split is interior (not a grid edge) and the bound is the
    minimum a golden-section search finds (4.92, against 2.07 by the statement read backwards)."""
    eps0 = 12 * 0.3 * math.sqrt(math.log(1e6) / 1001)
    bound = proof_bound(eps0, n=1001, cycles=2, delta=1e-5)
    expected, share = best_split_by_hand(eps0, 1001, 2, 1e-5)
    assert bound.epsilon == pytest.approx(expected, rel=1e-9) and bound.epsilon == pytest.approx(4.92, abs=5e-3)
    assert 0.05 < share < 0.95 and bound.delta_prime == pytest.approx(share * 1e-5, rel=1e-3)
    assert 2 * bound.window_delta + bound.delta_prime == pytest.approx(1e-5, rel=1e-12)
    for nudged in (0.9 * share, 1.1 * share):  # either way from the optimum the bound grows
        assert composed_by_hand(eps0, 1001, 2, 1e-5, nudged) > bound.epsilon
    assert bound.stated_epsilon < bound.epsilon / 2  # the statement understates this run's loss


def test_a_target_at_n_1001_is_met_by_the_proofs_own_bound(tmp_path, capsys, monkeypatch) -> None:
    """`topology generate ... --target-epsilon 0.3 --target-delta 1e-6 --cycles 2` on 1001 nodes: the proof's bound
    (Cor. 9 per window, advanced composition, best split found by hand) of the published gamma is the target, up
    to rounding and never above it; Cor. 9's conditions hold there, and the summary prints each with its value."""
    out = tmp_path / "t.json"
    monkeypatch.setenv("COLUMNS", "240")  # one summary row per line
    assert main(["topology", "generate", "ring", "--n", "1001", "--protocol", "ring-histogram", "--categories", "3",
                 "--target-epsilon", "0.3", "--target-delta", "1e-6", "--cycles", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    topology = load_topology(out)
    gamma = topology.protocol.gamma
    eps0 = math.log1p(3 * (1 - gamma) / gamma)
    best, share = best_split_by_hand(eps0, 1001, 2, 1e-6)
    assert 0.3 * (1 - 1e-6) < best <= 0.3 * (1 + 1e-9)
    window_delta = (1 - share) * 1e-6 / 2
    assert eps0 < 0.5 and window_delta < 0.01  # Cor. 9, with n = 1001 >= 100
    audited = paper_bound(planned_ring(topology), sigma=gamma, sensitivity=1.0, delta=1e-6,
                          threat_model=ThreatModel())
    assert audited.epsilon <= 0.3 and audited.epsilon == pytest.approx(best, rel=1e-9)
    assert {c.name: c.holds for c in audited.conditions if c.name.startswith("Cor. 9")} == {
        "Cor. 9: n >= 100 (answers shuffled per window)": True,
        "Cor. 9: 0 < eps0 < 1/2 (LDP level of RR_gamma)": True,
        "Cor. 9: delta_w < 1/100 (each window's delta)": True}
    cells = [line.split("│") for line in printed.splitlines() if "│" in line]
    rows = {cell[1].strip(): cell[2].strip() for cell in cells}
    assert rows["Cor. 9: 0 < eps0 < 1/2 (LDP level of RR_gamma)"] == f"holds (eps0 = {eps0:.6g})"
    assert rows["Cor. 9: n >= 100 (answers shuffled per window)"] == "holds (n = 1001)"
    window = audited.split["window_delta"]
    assert rows["Cor. 9: delta_w < 1/100 (each window's delta)"] == f"holds (delta_w = {window:.6g})"
    assert rows["Thm 2 by its proof: eps' of K = 2 windows at delta = 1e-06"] == "0.3 (target 0.3)"
    assert rows["Cor. 9's factor 12 sqrt(ln(1/delta_w)/n)"].endswith("(>= 1: the shuffle amplifies nothing at this n)")


def test_a_loose_target_stops_at_cor9s_eps0_below_one_half() -> None:
    """epsilon = 50 on 2000 nodes would allow eps0 above 1/2: gamma stops just inside Cor. 9's condition."""
    gamma = calibrate_gamma(2000, 3, 50.0, 1e-6, 1)
    assert 0.5 * (1 - 1e-9) < rr_epsilon(gamma, 3) < 0.5
    assert proof_bound(rr_epsilon(gamma, 3), n=2000, cycles=1, delta=1e-6).epsilon < 50.0


def test_a_target_the_proof_cannot_promise_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"needs n >= 100 answers per window") as refused:
        calibrate_gamma(8, 3, 0.3, 1e-5, 1)
    assert "\n" not in str(refused.value)
    for epsilon, delta in ((0.3, 0.0), (0.3, 0.02), (0.0, 1e-6)):
        with pytest.raises(ConfigError, match=r"target_delta in \(0, 1/100\)"):
            calibrate_gamma(5000, 3, epsilon, delta, 1)


def test_a_topology_with_the_statements_gamma_is_refused_when_loaded(tmp_path) -> None:
    out = tmp_path / "t.json"
    assert main(["topology", "generate", "ring", "--n", "1001", "--protocol", "ring-histogram", "--categories", "3",
                 "--target-epsilon", "0.3", "--target-delta", "1e-6", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    document["protocol"]["gamma"] = 3 / (math.exp(12 * 0.3 * math.sqrt(math.log(1e6) / 1001)) + 2)
    out.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"is not Thm 2's .* \(by its proof\)"):
        load_topology(out)


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
    assert "needs n >= 100 answers per window" in capsys.readouterr().err
