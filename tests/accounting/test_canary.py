"""The one-run canary audit of learning runs: Steinke et al.'s p-value, and a bound that stays below `exact`.

The GD runs are small rings with Metropolis weights (1/3 each) and one gossip round per step: with T
steps, node v sees the gradients of nodes at most T hops away, so on a ring of 10 with T = 3 the
pairs at distance 4 and 5 have zero sensitivity.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from coordinator_tools.audit.accountants import all_pairs
from coordinator_tools.audit.canary import (
    EPS_TOLERANCE,
    canary_audit,
    epsilon_lower,
    guess_levels,
    p_value,
)
from coordinator_tools.audit.checks import loss_checks
from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.accountant import account
from coordinator_tools.audit.protocols.muffliato_gd.sensitivity import gradient_sensitivity
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import UnrolledRun, fixed_schedule, unroll
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato_gd import MuffliatoGDParams

DELTA = 1e-5
N, STEPS = 10, 3


def papers_p_value(m: int, r: int, w: int, eps: float, delta: float) -> float:
    """Steinke, Nasr & Jagielski's reference loop (their Appendix D), scalar."""
    q = 1 / (1 + math.exp(-eps))
    alpha = window = 0.0
    for i in range(1, w + 1):
        window += binom.pmf(w - i, r, q)
        alpha = max(alpha, window / i)
    return min(1.0, binom.sf(w - 1, r, q) + 2 * m * delta * alpha)


def ring_run(n: int = N, steps: int = STEPS) -> UnrolledRun:
    weights = np.zeros((n, n))
    for v in range(n):
        weights[v, [(v - 1) % n, v, (v + 1) % n]] = 1 / 3
    return unroll(fixed_schedule(weights, steps=steps, rounds=1))


def audit_ring(run: UnrolledRun, pairs, *, sigma: float, seed: int, canaries: int = 1000):
    sensitivity = gradient_sensitivity(run, 1)  # scalar gradients: the canary's signs reach `lower`
    results = canary_audit(lambda v: run.linear_model(sensitivity.directions[:, v]), pairs, sigma=sigma,
                           sensitivity=1.0, delta=DELTA, canaries=canaries, rng_seed=seed)
    exact = {pair: float(gaussian_epsilon(np.sqrt(max(sensitivity.lower[pair], 0.0)) / sigma, DELTA))
             for pair in results}
    return results, exact


def test_without_delta_the_p_value_is_the_binomial_tail():
    """All 10 guesses right under ε = ln 3 (q = 3/4): p = (3/4)^10; 9 of 10: add 10 (3/4)^9 / 4."""
    assert p_value(10, 10, 10, math.log(3), 0.0) == pytest.approx(0.75**10, rel=1e-12)
    assert p_value(10, 10, 9, math.log(3), 0.0) == pytest.approx(0.75**10 + 10 * 0.75**9 / 4, rel=1e-12)
    assert p_value(10, 10, 0, 0.0, 0.0) == pytest.approx(1.0)


@pytest.mark.parametrize(("m", "r", "w", "eps"), [(1000, 1000, 700, 0.8), (1000, 250, 200, 1.5),
                                                  (500, 40, 33, 2.0), (1000, 14, 14, 0.3), (100, 100, 50, 0.1)])
def test_the_p_value_is_the_papers(m, r, w, eps):
    assert p_value(m, r, w, eps, DELTA) == pytest.approx(papers_p_value(m, r, w, eps, DELTA), rel=1e-9, abs=1e-15)
    assert p_value(m, r, w, eps, 1e-3) == pytest.approx(papers_p_value(m, r, w, eps, 1e-3), rel=1e-9, abs=1e-15)


def test_at_most_half_right_bounds_nothing_and_more_right_bounds_more():
    for r in (2, 10, 124, 1000):
        assert np.all(epsilon_lower(1000, r, np.arange(r // 2 + 1), DELTA) == 0.0)
    bounds = epsilon_lower(1000, 1000, np.arange(500, 1001), DELTA)
    assert np.all(np.diff(bounds) >= 0) and bounds[-1] > 5.0


def test_the_bound_is_where_the_p_value_crosses_the_level():
    guesses, correct = np.array([1000, 250, 62]), np.array([720, 210, 60])
    bounds = epsilon_lower(1000, guesses, correct, DELTA)
    assert np.all(bounds > 0)
    assert np.all(p_value(1000, guesses, correct, bounds, DELTA) <= 0.05)
    assert np.all(p_value(1000, guesses, correct, bounds + 2 * EPS_TOLERANCE, DELTA) > 0.05)


def test_guess_levels_halve_down_to_one():
    assert list(guess_levels(1000)) == [500, 250, 125, 62, 31, 15, 7]
    assert list(guess_levels(5)) == [2, 1]
    with pytest.raises(ValueError, match="at least 2"):
        guess_levels(1)


def test_a_neighbour_at_small_noise_is_caught_and_an_unseen_node_is_not():
    run = ring_run()
    results, exact = audit_ring(run, [(0, 1), (0, 5), (4, 0)], sigma=0.3, seed=0)
    assert 3.0 < results[(0, 1)].eps_lower <= exact[(0, 1)]
    assert exact[(0, 5)] == 0.0 and results[(0, 5)].eps_lower == 0.0
    assert results[(0, 1)].canaries == 1000 and results[(0, 1)].correct > results[(0, 1)].guesses / 2


def test_the_bound_stays_below_exact_over_many_seeds():
    """Each bound holds at 95%, so over 20 runs of every pair at most about 5% may exceed exact."""
    run = ring_run()
    pairs = all_pairs(run.linear_model(), ThreatModel())
    above = total = 0
    for seed in range(20):
        results, exact = audit_ring(run, pairs, sigma=1.0, seed=seed)
        above += sum(result.eps_lower > exact[pair] for pair, result in results.items())
        total += len(results)
    assert total == 20 * N * (N - 1) and above / total <= 0.05


def test_an_unseen_node_is_found_in_at_most_about_five_percent_of_runs():
    """The sharp case: zero sensitivity (distance 5 > T), so every positive bound is a false one.

    With all 2k = m guesses the first rejected W is 527 of 1000, P[Bin(1000, 1/2) ≥ 527] = 4.7%;
    1000 independent runs (one pair per source) put the observed rate within about ±0.7% of it.
    """
    run = ring_run()
    pairs = [(u, (u + N // 2) % N) for u in range(N)]
    positive = 0
    for seed in range(100):
        results, exact = audit_ring(run, pairs, sigma=1.0, seed=seed)
        assert all(exact[pair] == 0.0 for pair in pairs)
        positive += sum(result.eps_lower > 0 for result in results.values())
    assert positive / (100 * N) <= 0.06


def test_a_seed_reproduces_the_audit_and_sources_are_checked():
    run = ring_run()
    first, _ = audit_ring(run, [(0, 1), (2, 4)], sigma=1.0, seed=7, canaries=200)
    second, _ = audit_ring(run, [(0, 1), (2, 4)], sigma=1.0, seed=7, canaries=200)
    assert first == second
    with pytest.raises(ValueError, match="not sources"):
        audit_ring(run, [(3, 3)], sigma=1.0, seed=0)


def test_the_gd_accountant_reports_the_canary_audit():
    params = MuffliatoGDParams(sigma=0.5, sensitivity=1.0, alpha=2.0, dimension=2, task="least_squares",
                               steps=4, gossip_rounds=1, learning_rate=0.5, clip=0.5)
    topology = build_topology(generate("hypercube", n=8), graph_name="hypercube", run_id="canary", protocol=params)
    transcript = planned_transcript(topology, accelerated=False, rounds_per_step=1)
    options = dict(sigma=params.sigma, sensitivity=params.sensitivity, alpha=2.0, delta=DELTA)
    losses = account(transcript, **options, attack_pairs="all", attack_runs=500, rng_seed=1)
    empirical = losses.model_attack_eps_lower
    off = ~np.eye(8, dtype=bool)
    assert not np.isnan(empirical[off]).any() and np.nanmax(empirical) > 1.0
    assert all(check.ok for check in loss_checks(losses)), loss_checks(losses)
    assert any(note.startswith("model attack: canaries simulated") and "500 canaries" in note for note in losses.notes)
    named = account(transcript, **options, attack_pairs=[(0, 1), (3, 0)], rng_seed=1).model_attack_eps_lower
    assert np.count_nonzero(~np.isnan(named)) == 2 and named[0, 1] > 0
    assert account(transcript, **options).model_attack_eps_lower is None
