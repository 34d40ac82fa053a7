"""Random-walk DP-SGD (ICML 2024, "Differentially Private Decentralized Learning with Random Walks"): theory.

Units and conventions. W is the published symmetric bistochastic transition matrix (n×n). The
walk takes T steps; step t is taken by the holder path[t] (path[0] the start). At a step the
holder either contributes its clipped gradient (ℓ2 sensitivity Δ) or, past its contribution cap,
only noise; every step adds Gaussian noise of std σ (absolute, gradient units):
θ_{t+1} = θ_t − γ(g_t + η_t). θ_0 = 0 is public. Observer v sees θ_t at every step t with
path[t] == v (consecutive steps at v add nothing new: v knows its own gradient and noise).
σ_m = σ/Δ is the noise multiplier. Every loss is a Rényi divergence at order α (nats) in an
array indexed [source u, observer v], diagonal NaN.

* `theorem3_single`, `first_hit_sum`, `order_valid`: the paper's closed form per contribution.
* `realized_path_rdp` (amplification by iteration) and `segment_exact_rdp` (matrix-factorization
  model): the loss conditioned on one realized path; `ex_ante_rdp` averages over simulated paths.
* Definition 8's communicability with c_i = α/(σ_m² i) is L scaled, so no separate function;
  `estrada_communicability` (c_i = 1/i!) is for the Fig. 3 heatmap beside the loss matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

import numpy as np
import scipy.linalg
from scipy.special import logsumexp

TOL = 1e-9
PathLoss = Callable[..., np.ndarray]


def _check_transition(W: np.ndarray) -> np.ndarray:
    """Assumption 2 (symmetric bistochastic), and 1 > λ_2, λ_n > −1 as the proof of Thm 3 uses."""
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"W must be a square matrix, got shape {W.shape}")
    if not np.allclose(W, W.T, atol=TOL) or (W < -TOL).any() or not np.allclose(W.sum(1), 1, atol=TOL):
        raise ValueError("W must be symmetric bistochastic (ICML 2024 Assumption 2)")
    eig = np.linalg.eigvalsh(W)
    if eig[0] <= -1 + 1e-10:
        raise ValueError("W has eigenvalue -1 (periodic walk, e.g. an even ring): Thm 3 needs λ_n > -1, "
                         "the O(λ_n^T) remainder would not vanish")
    if eig[-2] >= 1 - 1e-10:
        raise ValueError("W has eigenvalue 1 more than once (disconnected graph): I - W + 11ᵀ/n is singular")
    return W


def _nan_diagonal(x: np.ndarray) -> np.ndarray:
    x = np.array(x, dtype=float)
    np.fill_diagonal(x, np.nan)
    return x


def order_valid(alpha: float | np.ndarray, noise_multiplier: float) -> bool | np.ndarray:
    """Thm 3 holds only for σ_m² ≥ 2α(α − 1) (the weak-convexity step); vectorised over α."""
    a = np.asarray(alpha, dtype=float)
    ok = (a > 1) & (noise_multiplier ** 2 >= 2 * a * (a - 1))
    return bool(ok) if ok.ndim == 0 else ok


def mask_orders(losses: np.ndarray, alphas: Sequence[float], noise_multiplier: float) -> np.ndarray:
    """Set losses[k] (order alphas[k]) to NaN where Thm 3 is not valid at that order."""
    out = np.array(losses, dtype=float)
    out[~np.atleast_1d(order_valid(np.asarray(alphas), noise_multiplier))] = np.nan
    return out


def log_matrix(W: np.ndarray) -> np.ndarray:
    """L = −log(I − W + 11ᵀ/n) = Σ_{i≥2} −log(1 − λ_i) φ_i φ_iᵀ: the all-ones direction has eigenvalue 1
    in I − W + 11ᵀ/n, so its log is 0 and it drops out with no need to single it out."""
    W = _check_transition(W)
    n = len(W)
    mu, phi = np.linalg.eigh(np.eye(n) - W + np.full((n, n), 1 / n))
    return -(phi * np.log(mu)) @ phi.T


def theorem3_single(W: np.ndarray, steps: int, alpha: float, noise_multiplier: float,
                    sender_known: bool = False, *, authors_code: bool = False) -> np.ndarray:
    """ICML 2024 Thm 3 for ONE contribution of u, as written: (α/σ_m²)(L[u,v] + H_T/n).

    H_T is the harmonic number Σ_{t≤T} 1/t (the proof's Σ 1/(n t)); the authors' code uses ln T
    (`authors_code=True` reproduces it). Multiply by u's (capped) number of contributions.
    sender_known (App. B.1): L[u,v] → max over w with W[v,w] > 0 of L[u,w]; w = u counts (the
    last hop may come from u) and so does w = v itself: the sender-known view contains the
    anonymous one, so its bound must not be smaller (the open-neighbourhood max is, for some
    pairs). All NaN when the order is invalid (σ_m² < 2α(α − 1)).
    """
    L = log_matrix(W)
    n = len(L)
    if not order_valid(alpha, noise_multiplier):  # σ_m = 0 included
        return np.full((n, n), np.nan)
    if sender_known:
        W = np.asarray(W, dtype=float)
        near = (W > 0) | np.eye(n, dtype=bool)  # near[v, w]: w may hand the token to v
        L = np.where(near[None, :, :], L[:, None, :], -np.inf).max(axis=2)
    harmonic = np.log(steps) if authors_code else np.sum(1 / np.arange(1, steps + 1))
    loss = alpha / noise_multiplier ** 2 * (L + harmonic / n)
    return _nan_diagonal(loss)


def first_hit_sum(W: np.ndarray, steps: int, alpha: float, noise_multiplier: float) -> np.ndarray:
    """Σ_{t=1}^{T} (W^t)[u,v] α/(σ_m² t) by matrix powers: the sum Thm 3 closes (up to O(λ_2^T))."""
    W = _check_transition(W)
    total, power = np.zeros_like(W), np.eye(len(W))
    for t in range(1, steps + 1):
        power = power @ W
        total += power / t
    return _nan_diagonal(alpha / noise_multiplier ** 2 * total)


def simulate_walk(W: np.ndarray, steps: int, start: int, rng: np.random.Generator) -> np.ndarray:
    """A path of the Markov chain W: path[0] = start, path[t+1] ~ W[path[t]]."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    cumulative = np.cumsum(np.asarray(W, dtype=float), axis=1)
    path = np.empty(steps, dtype=int)
    path[0] = start
    for t, draw in enumerate(rng.random(steps - 1), start=1):
        row = cumulative[path[t - 1]]
        path[t] = min(int(np.searchsorted(row, draw * row[-1], side="right")), len(row) - 1)
    return path


def contributions(path: Sequence[int], cap: int | None, n: int) -> np.ndarray:
    """Which steps bear a gradient: a node's first `cap` visits (all if cap is None); later ones add noise only."""
    path = np.asarray(path, dtype=int)
    if cap is None:
        return np.ones(len(path), dtype=bool)
    if cap < 0:
        raise ValueError(f"cap must be >= 0 or None, got {cap}")
    seen = np.zeros(n, dtype=int)
    bearing = np.zeros(len(path), dtype=bool)
    for t, node in enumerate(path):
        bearing[t] = seen[node] < cap
        seen[node] += 1
    return bearing


def _segments(path: np.ndarray, contributes: np.ndarray, v: int):
    """u's gradient steps that v ever sees, grouped by the observation r that first follows them.

    Yields (u, steps s, r, segment start): v knows θ after its own step, so the segment of an
    observation r is the steps strictly after v's previous observation (from 0 for the first).
    """
    seen = np.flatnonzero(path == v)
    steps = np.flatnonzero(contributes & (path != v))
    segment = np.searchsorted(seen, steps, side="right")
    keep = segment < len(seen)  # steps after v's last observation are unseen
    steps, segment = steps[keep], segment[keep]
    for u in np.unique(path[steps]):
        mine = path[steps] == u
        for j in np.unique(segment[mine]):
            yield u, steps[mine & (segment == j)], seen[j], 0 if j == 0 else seen[j - 1] + 1


def _taut_string(shifts: np.ndarray, r: int) -> float:
    """min Σ a_i² over Feldman et al.'s schedules (Σ_{i≤t} a_i ≤ Σ_{i≤t} s_i, equal at r − 1), unit shifts
    at `shifts`: the lower convex hull of the cumulative shifts, each piece costing rise²/run."""
    points = [(s - 1, j) for j, s in enumerate(shifts)] + [(r - 1, len(shifts))]
    hull: list[tuple[int, int]] = []
    for p in points:
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (p[1] - hull[-2][1])
                                  - (hull[-1][1] - hull[-2][1]) * (p[0] - hull[-2][0])) <= 0:
            hull.pop()
        hull.append(p)
    return sum((b[1] - a[1]) ** 2 / (b[0] - a[0]) for a, b in pairwise(hull))


def _path_inputs(path, contributes, n):
    path = np.asarray(path, dtype=int)
    contributes = np.asarray(contributes, dtype=bool)
    if path.shape != contributes.shape or path.ndim != 1 or (path < 0).any() or (path >= n).any():
        raise ValueError("path must be a 1-d sequence of nodes in [0, n) with one `contributes` flag per step")
    return path, contributes


def realized_path_rdp(path: Sequence[int], contributes: Sequence[bool], n: int, alpha: float,
                      sigma: float, sensitivity: float, *, joint: bool = True) -> np.ndarray:
    """Loss conditioned on the realized path by privacy amplification by iteration (Feldman et al. 2018;
    the paper's Thm 1). Assumes non-expansive updates (smooth convex loss, γ ≤ 2/L); clipping can break it.

    One gradient step of u at s, first seen by v at r > s: k = r − s noisy steps (s..r−1), the
    Gaussian bound α Δ²/(2σ² k); never seen: 0. The paper's per-step term α/(σ_m² t) is twice this
    constant for this sensitivity convention. Several steps of u before the same observation r share
    noise, so they are bounded jointly (Thm 1 with all their shifts, optimal schedule = taut string);
    observations compose (v knows θ after each of its steps). `joint=False` sums the single-step
    bounds instead, as the paper's composition over contributions does: that is NOT a bound (path
    [u, u, v]: 3αΔ²/(4σ²), below the exact αΔ²/σ² of identity updates, which are non-expansive).
    """
    path, contributes = _path_inputs(path, contributes, n)
    loss = np.zeros((n, n))
    for v in range(n):
        for u, shifts, r, _ in _segments(path, contributes, v):
            loss[u, v] += _taut_string(shifts, r) if joint else np.sum(1 / (r - shifts))
    return _nan_diagonal(alpha * sensitivity ** 2 / (2 * sigma ** 2) * loss)


def segment_exact_rdp(path: Sequence[int], contributes: Sequence[bool], n: int, alpha: float,
                      sigma: float, sensitivity: float) -> np.ndarray:
    """Exact Gaussian divergence of v's view in the matrix-factorization model: every step's gradient
    is a free input bounded by Δ, only u's differ (adaptive inputs: Denisov et al. 2022).

    v knows θ_0 = 0 and its own gradients and noise, so its view is equivalent to independent sums
    over the segments of steps strictly between consecutive observations (and [0, first one)).
    With c of u's gradient steps among k steps, the worst case aligns them: α (cΔ)²/(2σ² k) per
    segment, summed; steps after v's last observation are unseen.

    Against `realized_path_rdp`: this is never larger (Cauchy–Schwarz on the schedule), but it is a
    different model, not a tighter bound. Path [w, u, v]: αΔ²/(4σ²) here, since w's earlier noise
    also hides u's gradient in the sum v sees; amplification by iteration gives αΔ²/(2σ²), because a
    non-expansive step of u (e.g. x ↦ const) may erase earlier noise. Path [u, u, v]: both give
    αΔ²/σ², and the paper-style per-contribution sum (joint=False) gives 3αΔ²/(4σ²) < exact.
    """
    path, contributes = _path_inputs(path, contributes, n)
    loss = np.zeros((n, n))
    for v in range(n):
        for u, shifts, r, start in _segments(path, contributes, v):
            loss[u, v] += len(shifts) ** 2 / (r - start)
    return _nan_diagonal(alpha * sensitivity ** 2 / (2 * sigma ** 2) * loss)


def ex_ante_rdp(paths: Sequence[Sequence[int]], cap: int | None, n: int, alpha: float, sigma: float,
                sensitivity: float, loss: PathLoss = realized_path_rdp) -> np.ndarray:
    """(1/(α−1)) log E_path exp((α−1)·loss(path)) over `paths`, walks simulated from the published W: the Rényi
    divergence of a mixture over a data-independent path is at most this (the path itself being kept secret)."""
    if alpha <= 1 or not paths:
        raise ValueError("need alpha > 1 and at least one path")
    stack = [loss(path, contributions(path, cap, n), n, alpha, sigma, sensitivity) for path in paths]
    values = (alpha - 1) * np.array(stack)
    return _nan_diagonal((logsumexp(values, axis=0) - np.log(len(paths))) / (alpha - 1))


def estrada_communicability(adjacency: np.ndarray) -> np.ndarray:
    """Estrada–Hatano communicability expm(A) (Definition 8 with c_i = 1/i!), for the Fig. 3 heatmap."""
    return scipy.linalg.expm(np.asarray(adjacency, dtype=float))
