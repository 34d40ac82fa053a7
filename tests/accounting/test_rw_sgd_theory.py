"""Random-walk DP-SGD theory: ICML 2024 Thm 3 and the realized-path losses, against hand values and brute force."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from scipy import integrate, stats

from coordinator_tools.audit.protocols.rw_sgd import ex_ante, theory
from coordinator_tools.audit.protocols.token_sum.walks import simulate_walk, simulate_walks

ALPHA, SIGMA, DELTA = 3.0, 2.0, 0.5
UNIT = ALPHA * DELTA ** 2 / (2 * SIGMA ** 2)  # one Gaussian step seen directly: αΔ²/(2σ²)


def metropolis(graph: nx.Graph) -> np.ndarray:
    graph = nx.convert_node_labels_to_integers(graph)
    n, degree = graph.number_of_nodes(), dict(graph.degree())
    W = np.zeros((n, n))
    for a, b in graph.edges():
        W[a, b] = W[b, a] = 1 / (1 + max(degree[a], degree[b]))
    W[np.diag_indices(n)] = 1 - W.sum(axis=1)
    return W


def off_diagonal(x: np.ndarray) -> np.ndarray:
    return x[~np.eye(len(x), dtype=bool)]


@pytest.fixture(scope="module")
def davis() -> np.ndarray:
    return metropolis(nx.davis_southern_women_graph())


def test_complete_graph_has_no_pair_term():
    n, steps, alpha, sm = 6, 50, 2.0, 3.0
    W = np.full((n, n), 1 / n)
    harmonic = sum(1 / t for t in range(1, steps + 1))
    expected = alpha * harmonic / (sm ** 2 * n)
    assert np.allclose(theory.log_matrix(W), 0, atol=1e-12)
    for known in (False, True):
        assert np.allclose(off_diagonal(theory.theorem3_single(W, steps, alpha, sm, sender_known=known)), expected)
    assert np.allclose(off_diagonal(theory.first_hit_sum(W, steps, alpha, sm)), expected)
    assert np.isnan(np.diag(theory.theorem3_single(W, steps, alpha, sm))).all()


def test_theorem3_closes_the_first_hit_sum(davis):
    steps, alpha, sm = 2000, 2.0, 4.0
    closed = theory.theorem3_single(davis, steps, alpha, sm)
    direct = theory.first_hit_sum(davis, steps, alpha, sm)
    assert davis.shape == (32, 32)
    assert np.abs(off_diagonal(closed - direct)).max() < 1e-6
    assert np.ptp(off_diagonal(closed)) > 0.01  # the pair term is really there
    # the authors' code uses ln T for H_T: a constant shift of α(H_T − ln T)/(σ_m² n)
    authors = theory.theorem3_single(davis, steps, alpha, sm, authors_code=True)
    gap = alpha * (sum(1 / t for t in range(1, steps + 1)) - np.log(steps)) / (sm ** 2 * 32)
    assert np.allclose(off_diagonal(closed - authors), gap)


def test_log_matrix_is_the_eigen_formula(davis):
    lam, phi = np.linalg.eigh(davis)
    keep = lam < 1 - 1e-9  # drop the eigenvalue-1 (all-ones) component
    expected = (phi[:, keep] * -np.log(1 - lam[keep])) @ phi[:, keep].T
    assert np.allclose(theory.log_matrix(davis), expected, atol=1e-12)


def test_sender_known_takes_the_neighbourhood_max(davis):
    steps, alpha, sm = 100, 2.0, 4.0
    anonymous = theory.theorem3_single(davis, steps, alpha, sm)
    known = theory.theorem3_single(davis, steps, alpha, sm, sender_known=True)
    assert (off_diagonal(known) >= off_diagonal(anonymous) - 1e-12).all()
    assert (off_diagonal(known) > off_diagonal(anonymous) + 1e-6).any()
    L, shift = theory.log_matrix(davis), alpha * sum(1 / t for t in range(1, steps + 1)) / (sm ** 2 * 32)
    for u, v in [(0, 5), (3, 20), (31, 1)]:
        near = [w for w in range(32) if davis[v, w] > 0 or w == v]
        assert known[u, v] == pytest.approx(alpha / sm ** 2 * max(L[u, w] for w in near) + shift)
    u, v = next((a, b) for a, b in np.argwhere(davis > 0) if a != b)
    assert known[u, v] >= alpha / sm ** 2 * L[u, u] + shift - 1e-12  # the last hop may come from u itself
    # no self-loops: the max over v's other neighbours alone is below the anonymous value (u, v adjacent)
    ring = (np.roll(np.eye(5), 1, axis=1) + np.roll(np.eye(5), -1, axis=1)) / 2
    ring_l = theory.log_matrix(ring)
    assert max(ring_l[0, 0], ring_l[0, 2]) < ring_l[0, 1]
    assert theory.theorem3_single(ring, steps, alpha, sm, sender_known=True)[0, 1] == pytest.approx(
        theory.theorem3_single(ring, steps, alpha, sm)[0, 1])


def test_refuses_matrices_outside_assumption_2():
    even_ring = (np.roll(np.eye(6), 1, axis=1) + np.roll(np.eye(6), -1, axis=1)) / 2  # no self-loops: periodic
    with pytest.raises(ValueError, match="eigenvalue -1"):
        theory.theorem3_single(even_ring, 10, 2.0, 4.0)
    odd_ring = (np.roll(np.eye(5), 1, axis=1) + np.roll(np.eye(5), -1, axis=1)) / 2
    assert np.isfinite(off_diagonal(theory.theorem3_single(odd_ring, 10, 2.0, 4.0))).all()
    two_pieces = np.kron(np.eye(2), np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="disconnected"):
        theory.theorem3_single(two_pieces, 10, 2.0, 4.0)
    lopsided = np.array([[0.5, 0.5, 0.0], [0.2, 0.5, 0.3], [0.3, 0.0, 0.7]])
    with pytest.raises(ValueError, match="symmetric bistochastic"):
        theory.theorem3_single(lopsided, 10, 2.0, 4.0)


def test_order_mask():
    assert theory.order_valid(2.0, 2.0)  # σ_m² = 4 = 2·2·1
    assert not theory.order_valid(2.0, 1.99)
    assert not theory.order_valid(1.0, 100.0)
    alphas = np.array([1.5, 2.0, 2.5, 3.0])
    assert list(theory.order_valid(alphas, 3.0)) == [True, True, True, False]  # 9 < 2·3·2
    W = metropolis(nx.path_graph(4))
    assert np.isnan(theory.theorem3_single(W, 10, 8.0, 3.0)).all()
    stack = np.stack([theory.theorem3_single(W, 10, a, 100.0) for a in alphas])
    masked = theory.mask_orders(stack, alphas, 3.0)
    assert np.isnan(masked[3]).all() and np.array_equal(masked[:3], stack[:3], equal_nan=True)


# Hand values in units of αΔ²/(2σ²); NaN on the diagonal.
HAND = {
    # w, u, v: u's step is seen after 1 noisy step (PABI 1) but inside a 2-step sum (exact 1/2)
    "w-u-v": ([1, 0, 2], 3, [[0, 0, 1], [1, 0, 1 / 2], [0, 0, 0]], [[0, 0, 1 / 2], [1, 0, 1 / 2], [0, 0, 0]]),
    # u, u, v: two aligned steps in one 2-step sum: exact (2Δ)²/(2·2σ²) = 2 units; joint PABI too
    "u-u-v": ([0, 0, 1], 2, [[0, 2], [0, 0]], [[0, 2], [0, 0]]),
    # 0 1 0 2: node 0's steps 0 and 2 both first reach 2 at step 3
    "four": ([0, 1, 0, 2], 3, [[0, 1, 3 / 2], [1, 0, 1 / 2], [0, 0, 0]], [[0, 1, 4 / 3], [1, 0, 1 / 3], [0, 0, 0]]),
}


@pytest.mark.parametrize("case", HAND)
def test_realized_and_segment_by_hand(case):
    path, n, realized, exact = HAND[case]
    every = np.ones(len(path), dtype=bool)
    got_realized = theory.realized_path_rdp(path, every, n, ALPHA, SIGMA, DELTA)
    got_exact = theory.segment_exact_rdp(path, every, n, ALPHA, SIGMA, DELTA)
    assert np.allclose(off_diagonal(got_realized), off_diagonal(UNIT * np.array(realized, dtype=float)))
    assert np.allclose(off_diagonal(got_exact), off_diagonal(UNIT * np.array(exact, dtype=float)))
    assert np.isnan(np.diag(got_realized)).all() and np.isnan(np.diag(got_exact)).all()


def test_each_column_smaller_in_one_example():
    every = np.ones(3, dtype=bool)
    # w, u, v: the matrix-factorization value is half the amplification-by-iteration bound
    assert theory.segment_exact_rdp([1, 0, 2], every, 3, ALPHA, SIGMA, DELTA)[0, 2] == pytest.approx(UNIT / 2)
    assert theory.realized_path_rdp([1, 0, 2], every, 3, ALPHA, SIGMA, DELTA)[0, 2] == pytest.approx(UNIT)
    # u, u, v: the paper-style per-contribution sum is below the exact value of identity updates
    paper_style = theory.realized_path_rdp([0, 0, 1], every, 2, ALPHA, SIGMA, DELTA, joint=False)[0, 1]
    exact = theory.segment_exact_rdp([0, 0, 1], every, 2, ALPHA, SIGMA, DELTA)[0, 1]
    assert paper_style == pytest.approx(UNIT * 3 / 2) and exact == pytest.approx(UNIT * 2)


def brute_force_exact(path, contributes, n, u, v):
    """max over sign patterns of α/2 dᵀΣ⁺d for v's observations of the residual sums (unit σ = Δ = 1)."""
    path = np.asarray(path)
    seen = np.flatnonzero(path == v)
    if len(seen) == 0:
        return 0.0
    others = path != v
    cov = np.array([[others[:min(a, b)].sum() for b in seen] for a in seen], dtype=float)
    mine = np.flatnonzero(contributes & (path == u))
    best = 0.0
    for signs in itertools.product([-1.0, 1.0], repeat=len(mine)):
        d = np.array([sum(s for s, i in zip(signs, mine) if i < o) for o in seen])
        best = max(best, d @ np.linalg.pinv(cov) @ d)
    return ALPHA / 2 * best


def test_segment_exact_is_the_exact_gaussian_view():
    rng = np.random.default_rng(7)
    for _ in range(40):
        n, steps = 4, int(rng.integers(3, 10))
        path = rng.integers(0, n, steps)
        contributes = rng.random(steps) < 0.8
        got = theory.segment_exact_rdp(path, contributes, n, ALPHA, 1.0, 1.0)
        for u, v in itertools.permutations(range(n), 2):
            assert got[u, v] == pytest.approx(brute_force_exact(path, contributes, n, u, v), abs=1e-9)


def feldman_optimum(s: np.ndarray) -> float:
    """min Σ a² s.t. Σ_{i≤t} a_i ≤ Σ_{i≤t} s_i, with equality at the end, by trying every active set:
    the optimum is the least-norm solution of its active constraints taken as equalities."""
    k, prefix = len(s), np.tril(np.ones((len(s), len(s))))
    best = np.inf
    for active in itertools.product([False, True], repeat=k - 1):
        rows = prefix[np.append(np.array(active, dtype=bool), True)]
        a = rows.T @ np.linalg.solve(rows @ rows.T, rows @ s)
        if (prefix @ a <= prefix @ s + 1e-12).all():
            best = min(best, a @ a)
    return best


def test_joint_amplification_is_feldmans_optimal_schedule():
    rng = np.random.default_rng(3)
    for _ in range(40):
        k = int(rng.integers(2, 9))
        shift = rng.random(k) < 0.5
        shift[rng.integers(k)] = True
        path = np.where(shift, 0, 2).tolist() + [1]  # u = 0 at the shifts, filler 2, then v = 1
        every = np.ones(k + 1, dtype=bool)
        got = theory.realized_path_rdp(path, every, 3, ALPHA, SIGMA, DELTA)[0, 1] / UNIT
        assert got == pytest.approx(feldman_optimum(shift.astype(float)), rel=1e-12)
        assert got >= theory.segment_exact_rdp(path, every, 3, ALPHA, SIGMA, DELTA)[0, 1] / UNIT - 1e-12


def test_joint_amplification_never_below_segment_exact(davis):
    rng = np.random.default_rng(11)
    for _ in range(5):
        path = simulate_walk(davis, 300, 0, rng)
        contributes = theory.contributions(path, 3, 32)
        realized = theory.realized_path_rdp(path, contributes, 32, ALPHA, SIGMA, DELTA)
        exact = theory.segment_exact_rdp(path, contributes, 32, ALPHA, SIGMA, DELTA)
        assert (off_diagonal(realized) >= off_diagonal(exact) - 1e-12).all()


def test_cap_stops_the_leak():
    path = [0, 1, 0, 1, 0, 2]
    assert theory.contributions(path, 1, 3).tolist() == [True, True, False, False, False, True]
    assert theory.contributions(path, 2, 3).tolist() == [True, True, True, True, False, True]
    assert not theory.contributions(path, 0, 3).any()
    assert theory.contributions(path, None, 3).all()
    capped = theory.contributions(path, 1, 3)
    for loss in (theory.realized_path_rdp, theory.segment_exact_rdp):
        once = loss(path, capped, 3, ALPHA, SIGMA, DELTA)
        # after its first visit, node 0 only adds noise: as if its later visits were anyone else's noise
        alone = loss(path, [True] + [False] * 5, 3, ALPHA, SIGMA, DELTA)
        assert once[0, 2] == pytest.approx(alone[0, 2]) and once[0, 1] == pytest.approx(alone[0, 1])
        assert loss(path, theory.contributions(path, None, 3), 3, ALPHA, SIGMA, DELTA)[0, 2] > once[0, 2]
        assert np.allclose(off_diagonal(loss(path, np.zeros(6, bool), 3, ALPHA, SIGMA, DELTA)), 0)
    assert theory.realized_path_rdp(path, capped, 3, ALPHA, SIGMA, DELTA)[0, 2] == pytest.approx(UNIT / 5)


def test_ex_ante_one_walk_and_jensen(davis):
    steps, cap, walks = 200, 2, 30
    for loss in (theory.realized_path_rdp, theory.segment_exact_rdp):
        path = simulate_walk(davis, steps, 4, np.random.default_rng(5))
        direct = loss(path, theory.contributions(path, cap, 32), 32, ALPHA, SIGMA, DELTA)
        one = ex_ante.LogMeanExp(ALPHA)
        one.add(np.nan_to_num(direct)[None])
        assert np.allclose(off_diagonal(one.estimate()), off_diagonal(direct))
        paths = simulate_walks(davis, steps, 4, walks, np.random.default_rng(9))
        losses = np.array([loss(p, theory.contributions(p, cap, 32), 32, ALPHA, SIGMA, DELTA) for p in paths])
        many = ex_ante.LogMeanExp(ALPHA)
        many.add(np.nan_to_num(losses))
        many = many.estimate()
        assert (off_diagonal(many) >= off_diagonal(losses.mean(axis=0)) - 1e-12).all()
        assert (off_diagonal(many) <= off_diagonal(losses.max(axis=0)) + 1e-12).all()
        assert (off_diagonal(many) > off_diagonal(losses.mean(axis=0)) + 1e-9).any()


def test_a_batch_of_walks_is_each_walk_accounted_alone(davis, monkeypatch):
    """`path_geometry` over a stack of walks, its observers in blocks of a few, equals each walk's own losses."""
    paths = simulate_walks(davis, 150, 0, 12, np.random.default_rng(4))
    contributes = theory.contributions(paths, 3, 32)
    assert all(np.array_equal(contributes[k], theory.contributions(paths[k], 3, 32)) for k in range(12))
    unit = 2 * SIGMA**2 / (ALPHA * DELTA**2)
    for rule, single in (("amplification", theory.realized_path_rdp), ("segment", theory.segment_exact_rdp)):
        with monkeypatch.context() as patch:
            patch.setattr(theory, "BATCH_ENTRIES", 2000)  # a handful of observers per block
            batch = theory.path_geometry(paths, contributes, 32, rule)
        for k in range(12):
            alone = single(paths[k], contributes[k], 32, ALPHA, SIGMA, DELTA) * unit
            assert np.allclose(off_diagonal(batch[k]), off_diagonal(alone), rtol=1e-12, atol=0)


def test_simulated_walk_follows_w():
    W = metropolis(nx.path_graph(4))
    path = simulate_walk(W, 20000, 1, np.random.default_rng(0))
    assert path[0] == 1 and len(path) == 20000
    assert (W[path[:-1], path[1:]] > 0).all()
    counts = np.zeros((4, 4))
    np.add.at(counts, (path[:-1], path[1:]), 1)
    observed = counts / counts.sum(axis=1, keepdims=True)
    assert np.abs(observed - W).max() < 0.03
    assert np.abs(np.bincount(path, minlength=4) / len(path) - 1 / 4).max() < 0.03  # uniform stationary law


def test_gaussian_shift_divergence_by_integration():
    mu = DELTA / SIGMA

    def integrand(x: float) -> float:  # p^α q^(1−α), in logs so the tails do not overflow
        return np.exp(ALPHA * stats.norm.logpdf(x, mu) + (1 - ALPHA) * stats.norm.logpdf(x))

    integral, _ = integrate.quad(integrand, -np.inf, np.inf, epsabs=0, epsrel=1e-12)
    renyi = np.log(integral) / (ALPHA - 1)
    assert renyi == pytest.approx(ALPHA * mu ** 2 / 2, rel=1e-8)
    every = np.ones(2, dtype=bool)
    assert theory.realized_path_rdp([0, 1], every, 2, ALPHA, SIGMA, DELTA)[0, 1] == pytest.approx(renyi)
    assert theory.segment_exact_rdp([0, 1], every, 2, ALPHA, SIGMA, DELTA)[0, 1] == pytest.approx(renyi)


def test_estrada_communicability():
    A = nx.to_numpy_array(nx.path_graph(4))
    lam, phi = np.linalg.eigh(A)
    got = theory.estrada_communicability(A)
    assert np.allclose(got, (phi * np.exp(lam)) @ phi.T)
    assert got[0, 1] > got[0, 2] > got[0, 3] > 0
