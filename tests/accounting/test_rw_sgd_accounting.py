"""Random-walk DP-SGD's columns: Thm 3 converted over the orders where it holds only, the ex-ante column's interval,
and every column named for what it is given; against values computed here by other routes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
from dp_accounting.rdp import compute_epsilon
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

from coordinator_tools.audit.checks import loss_checks
from coordinator_tools.audit.conversion import ORDERS
from coordinator_tools.audit.html import write_html
from coordinator_tools.audit.protocols.rw_sgd import ex_ante, theory
from coordinator_tools.audit.protocols.rw_sgd.accountant import account, paper_column
from coordinator_tools.audit.protocols.token_sum.run import path_run, transition_matrix
from coordinator_tools.audit.protocols.token_sum.walks import simulate_walk, simulate_walks
from coordinator_tools.audit.report import build_report, write_report
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.rw_sgd import RwSgdParams
from node.topology import Topology

DELTA = 1e-5


def walk_topology(graph: str, n: int, *, sigma: float, steps: int, alpha: float = 2.0, sensitivity: float = 1.0,
                  cap: int | None = None) -> Topology:
    params = RwSgdParams(sigma=sigma, sensitivity=sensitivity, alpha=alpha, dimension=2, task="logistic",
                         steps=steps, learning_rate=0.5, clip=0.5, adjacency="dataset", sender="anonymous",
                         contribution_cap=cap)
    return build_topology(generate(graph, n=n), graph_name=graph, run_id="rw-accounting", protocol=params)


def options(topology: Topology, **overrides: object) -> dict[str, object]:
    params = topology.protocol
    return {"sigma": params.sigma, "sensitivity": params.sensitivity, "alpha": params.alpha, "delta": DELTA,
            **overrides}


def tight_epsilon(rdp: float, alpha: float) -> float:
    """dp-accounting's conversion at one order, written out: rdp + log(1 − 1/α) − log(δα)/(α − 1)."""
    return rdp + math.log1p(-1 / alpha) - math.log(DELTA * alpha) / (alpha - 1)


def thm3_rdp_slope(topology: Topology, contributions: np.ndarray) -> np.ndarray:
    """Thm 3's RDP over α [u, v] for an anonymous sender, by scipy's matrix log: c_u (L[u,v] + H_T/n) / σ_m²."""
    n, params = topology.n, topology.protocol
    L = -scipy.linalg.logm(np.eye(n) - transition_matrix(topology) + np.full((n, n), 1 / n)).real
    harmonic = sum(1 / t for t in range(1, params.steps + 1))
    slope = contributions[:, None] * np.maximum(L + harmonic / n, 0.0) / (params.sigma / params.sensitivity) ** 2
    np.fill_diagonal(slope, np.nan)
    return slope


def test_paper_eps_is_the_smallest_over_the_orders_where_thm3_holds():
    """σ_m = 1.5 on an 8-node hypercube: Thm 3 holds up to α = (1 + √5.5)/2 ≈ 1.67 only; each pair's ε is the
    continuous minimum over (1, 1.67] found by scipy, to 0.1%, never below it, and well above what converting
    over every order to 2^20 gave."""
    topology = walk_topology("hypercube", 8, sigma=1.5, steps=40)
    contributions = np.array([1.0, 2, 3, 5, 5, 8, 1, 4])
    rdp, eps = paper_column(topology, contributions, options(topology))
    slope = thm3_rdp_slope(topology, contributions)
    top = (1 + math.sqrt(1 + 2 * 1.5**2)) / 2
    assert 2 * top * (top - 1) == pytest.approx(1.5**2)
    assert np.isnan(rdp).all()  # the report's α = 2 is outside the theorem
    unrestricted = []
    for u, v in zip(*np.nonzero(~np.eye(8, dtype=bool))):
        search = minimize_scalar(lambda a, s=slope[u, v]: tight_epsilon(a * s, a), bounds=(1 + 1e-9, top),
                                 method="bounded", options={"xatol": 1e-10})
        best = min(search.fun, tight_epsilon(top * slope[u, v], top))  # the search stops short of the end
        assert best * (1 - 1e-12) <= eps[u, v] <= best * (1 + 1e-3), (u, v)
        unrestricted.append(compute_epsilon(ORDERS, ORDERS * slope[u, v], DELTA)[0])
    assert np.nanmin(eps) > 2 * min(unrestricted)


def test_at_noise_multiplier_3_no_pair_goes_below_the_valid_orders_floor():
    """σ_m = 3, δ = 1e-5: the largest valid order is (1 + √19)/2, where log(1 − 1/α) − log(δα)/(α − 1) = 5.80, and
    every smaller order costs more, so no pair's ε is below 5.80. On the complete graph with one step per node
    (T = n = 64) the faintest pairs converted over every order (up to 2^20) came out near 0.6."""
    topology = walk_topology("complete", 64, sigma=3.0, steps=64)
    top = (1 + math.sqrt(19)) / 2
    floor = tight_epsilon(0.0, top)
    assert floor == pytest.approx(5.80, abs=0.005)
    assert all(tight_epsilon(0.0, a) > floor for a in np.linspace(1.05, top - 1e-6, 50))
    _, eps = paper_column(topology, np.ones(64), options(topology))
    assert np.nanmin(eps) >= floor - 1e-12
    slope = thm3_rdp_slope(topology, np.ones(64))[0, 1]
    assert compute_epsilon(ORDERS, ORDERS * slope, DELTA)[0] < 0.7  # what the unrestricted conversion reported


def test_without_a_valid_order_the_paper_column_is_not_computed():
    """σ_m = 0.1: the largest valid order is 1.005, below the conversion's 1.01; σ = 0: none at all."""
    for sigma in (0.1, 0.0):
        topology = walk_topology("hypercube", 8, sigma=sigma, steps=40)
        run = path_run(topology, simulate_walk(transition_matrix(topology), 40, 0,
                                                      np.random.default_rng(1)).tolist())
        losses = account(run, **options(topology))
        assert np.isnan(losses.paper_eps).all() and np.isnan(losses.paper_rdp).all()
        assert any(note.startswith("paper: eps not computed: Thm 3 holds at no order") for note in losses.notes)


def test_the_classic_conversion_stays_at_the_reports_order():
    topology = walk_topology("hypercube", 8, sigma=3.0, steps=40)
    contributions = np.full(8, 5.0)
    slope = thm3_rdp_slope(topology, contributions)
    rdp, eps = paper_column(topology, contributions, options(topology, conversion="paper"))
    assert np.allclose(rdp, 2.0 * slope, equal_nan=True, rtol=1e-9)
    assert np.allclose(eps, 2.0 * slope + math.log(1 / DELTA), equal_nan=True, rtol=1e-9)
    rdp, eps = paper_column(topology, contributions, options(topology, conversion="paper", alpha=4.0))
    assert np.isnan(rdp).all() and np.isnan(eps).all()  # 9 < 2·4·3


def test_streamed_log_mean_exp_and_its_interval_match_the_formulas_on_all_samples():
    rng = np.random.default_rng(0)
    samples = rng.exponential(size=(300, 4, 4)) * 3
    mixture = ex_ante.LogMeanExp(2.5)
    for first in range(0, 300, 37):
        mixture.add(samples[first:first + 37])
    values = np.exp(1.5 * samples)
    assert np.allclose(mixture.estimate(), (logsumexp(1.5 * samples, axis=0) - np.log(300)) / 1.5, rtol=1e-12)
    half = 1.959963984540054 * values.std(axis=0, ddof=1) / np.sqrt(300)
    assert np.allclose(mixture.upper(), np.log(values.mean(axis=0) + half) / 1.5, rtol=1e-10)


def test_the_interval_covers_the_true_value_about_95_percent_of_the_time():
    """Losses 0 or 1 (probability 0.3) at α = 3: E exp(2·loss) = 0.7 + 0.3e², known exactly; 2000 draws of
    200 samples each, every interval's upper end above the truth in ~97.5% of draws (a two-sided 95% interval)."""
    rng = np.random.default_rng(1)
    truth = math.log(0.7 + 0.3 * math.e**2) / 2
    draws = (rng.random((200, 2000)) < 0.3).astype(float)
    mixture = ex_ante.LogMeanExp(3.0)
    mixture.add(draws)
    above = np.mean(mixture.upper() >= truth)
    assert 0.96 <= above <= 0.99, above


def test_ex_ante_draws_walks_until_the_median_interval_is_narrow_and_equals_its_walks_by_hand():
    """On a 6-node ring the column comes from the walks `simulate_walks` draws from the seed (300 fit in one
    batch), each accounted alone by `realized_path_rdp`; left to itself it stops once the median pair's
    half-width is 2% of its value."""
    topology = walk_topology("ring", 6, sigma=4.0, sensitivity=2.0, steps=30, cap=3)
    W = transition_matrix(topology)
    estimate = ex_ante.simulate(W, 30, 0, 3, alpha=2.0, sigma=4.0, sensitivity=2.0, seed=5)
    assert ex_ante.MIN_WALKS <= estimate.walks < ex_ante.MAX_WALKS
    assert estimate.to_json()["relative_half_width"]["median"] <= ex_ante.TARGET_RELATIVE_HALF_WIDTH
    fixed = ex_ante.simulate(W, 30, 0, 3, alpha=2.0, sigma=4.0, sensitivity=2.0, seed=5, walks=300)
    assert theory.BATCH_ENTRIES // (30 * 6) >= 300
    paths = simulate_walks(W, 30, 0, 300, np.random.default_rng(5))
    losses = np.array([theory.realized_path_rdp(path, theory.contributions(path, 3, 6), 6, 2.0, 4.0, 2.0)
                       for path in paths])
    off = ~np.eye(6, dtype=bool)
    assert np.allclose(fixed.rdp, logsumexp(losses, axis=0) - np.log(300), equal_nan=True, rtol=1e-10)
    assert fixed.walks == 300 and (fixed.rdp_upper[off] > fixed.rdp[off]).all()


def test_every_column_says_what_it_is_given_and_the_undercount_line_compares_like_with_like(tmp_path: Path):
    """An audited walk: exact, linearized and realized_path are named as given the realized path, the undercount
    check as the comparison it is (exact is now a proven upper bound given the path, so the line states where the
    bound is below it, with no warning), ex_ante leads with the upper end of its interval; the page shows each
    column's line and the exact column's conditions."""
    topology = walk_topology("hypercube", 8, sigma=2.0, steps=40, cap=8)
    path = simulate_walk(transition_matrix(topology), 40, 0, np.random.default_rng(2)).tolist()
    run = path_run(topology, path)
    losses = account(run, **options(topology))
    check = next(c for c in loss_checks(losses) if "paper bound" in c.name)
    assert check.name == "paper bound vs exact (a proven upper bound) given the realized path"
    assert "given the realized path" in check.detail and check.level == "pass"
    report = build_report(losses, run, checks=loss_checks(losses)).document
    definitions = report["column_definitions"]
    for column in ("exact", "realized_path"):
        assert definitions[column].startswith("given the realized path (the observer is not told it)")
    assert "given the realized path (the observer is not told it)" in definitions["linearized"]
    assert [condition[:3] for condition in report["assumptions"]["exact"]["conditions"]] == ["A1:", "A2:", "A3:",
                                                                                            "A4:"]
    assert definitions["ex_ante"].startswith("the path kept secret")
    assert report["summary"]["paper_undercounts"]["exact_given"] == "the realized path"
    means = list(report["summary"]["mean_rdp_per_observer"])
    assert means.index("ex_ante_upper") == means.index("ex_ante") - 1
    column = report["pairs"][0]["ex_ante"]
    assert column["rdp_upper"] >= column["rdp"] and column["eps_upper"] >= column["eps"]
    json_path, *_ = write_report(build_report(losses, run), tmp_path)
    page = write_html(json.loads(json_path.read_text()), tmp_path, {}).read_text()
    assert "<h2>Columns</h2>" in page and "given the realized path (the observer is not told it)" in page
    assert "<li>A2: fresh independent N(0, sigma^2) noise at every step</li>" in page
