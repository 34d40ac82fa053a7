"""Random-walk DP-SGD (ICML 2024, "Differentially Private Decentralized Learning with Random Walks"): theory.

Units and conventions. W is the published symmetric bistochastic transition matrix (n×n). The
walk takes T steps; step t is taken by the holder path[t] (path[0] the start). At a step the
holder either contributes its clipped gradient (ℓ2 sensitivity Δ) or, past its contribution cap,
only noise; every step adds Gaussian noise of std σ (absolute, gradient units):
θ_{t+1} = θ_t − γ(g_t + η_t). θ_0 = 0 is public. Observer v sees θ_t at every step t with
path[t] == v (consecutive steps at v add nothing new: v knows its own gradient and noise).
σ_m = σ/Δ is the noise multiplier. Every loss is a Rényi divergence at order α (nats) in an
array indexed [source u, observer v], diagonal NaN.

* `theorem3_single` (`theorem3_factor` times α/σ_m²), `first_hit_sum`, `order_valid`,
  `largest_valid_order`: the paper's closed form per contribution and the orders where it holds.
* `realized_path_rdp` (amplification by iteration, a bound for non-expansive steps) and
  `segment_exact_rdp` (the linearized matrix-factorization model, no bound on a run): the loss
  conditioned on one realized path; `path_geometry` computes either for a batch
  of walks at once (`token_sum.walks.simulate_walks`), which `ex_ante` averages over.
* Definition 8's communicability with c_i = α/(σ_m² i) is L scaled, so no separate function;
  `estrada_communicability` (c_i = 1/i!) is for the Fig. 3 heatmap beside the loss matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike

TOL = 1e-9
# (gradient step, observer) rows the batched path losses handle at once: a few int64 arrays of this length.
BATCH_ENTRIES = 1 << 18
PathRule = Literal["amplification", "per_step", "segment"]


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


def largest_valid_order(noise_multiplier: float) -> float:
    """The largest α at which Thm 3 holds, the root (1 + √(1 + 2σ_m²))/2 of σ_m² = 2α(α − 1), rounded down until
    `order_valid` agrees; 1 (no order) without noise."""
    alpha = (1 + np.sqrt(1 + 2 * noise_multiplier**2)) / 2
    while alpha > 1 and not order_valid(alpha, noise_multiplier):
        alpha = np.nextafter(alpha, 1.0)
    return float(alpha)


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


def theorem3_factor(W: np.ndarray, steps: int, sender_known: bool = False, *, authors_code: bool = False
                    ) -> np.ndarray:
    """ICML 2024 Thm 3 for ONE contribution of u without its α/σ_m²: L[u,v] + H_T/n (diagonal NaN).

    H_T is the harmonic number Σ_{t≤T} 1/t (the proof's Σ 1/(n t)); the authors' code uses ln T
    (`authors_code=True` reproduces it). sender_known (App. B.1): L[u,v] → max over w with
    W[v,w] > 0 of L[u,w]; w = u counts (the last hop may come from u) and so does w = v itself: the
    sender-known view contains the anonymous one, so its bound must not be smaller (the
    open-neighbourhood max is, for some pairs).
    """
    L = log_matrix(W)
    n = len(L)
    if sender_known:
        W = np.asarray(W, dtype=float)
        near = (W > 0) | np.eye(n, dtype=bool)  # near[v, w]: w may hand the token to v
        L = np.where(near[None, :, :], L[:, None, :], -np.inf).max(axis=2)
    harmonic = np.log(steps) if authors_code else np.sum(1 / np.arange(1, steps + 1))
    return _nan_diagonal(L + harmonic / n)


def theorem3_single(W: np.ndarray, steps: int, alpha: float, noise_multiplier: float,
                    sender_known: bool = False, *, authors_code: bool = False) -> np.ndarray:
    """ICML 2024 Thm 3 for ONE contribution of u, as written: (α/σ_m²)(L[u,v] + H_T/n) (`theorem3_factor`).
    Multiply by u's (capped) number of contributions. All NaN when the order is invalid (σ_m² < 2α(α − 1))."""
    factor = theorem3_factor(W, steps, sender_known, authors_code=authors_code)
    if not order_valid(alpha, noise_multiplier):  # σ_m = 0 included
        return np.full(factor.shape, np.nan)
    return alpha / noise_multiplier ** 2 * factor


def first_hit_sum(W: np.ndarray, steps: int, alpha: float, noise_multiplier: float) -> np.ndarray:
    """Σ_{t=1}^{T} (W^t)[u,v] α/(σ_m² t) by matrix powers: the sum Thm 3 closes (up to O(λ_2^T))."""
    W = _check_transition(W)
    total, power = np.zeros_like(W), np.eye(len(W))
    for t in range(1, steps + 1):
        power = power @ W
        total += power / t
    return _nan_diagonal(alpha / noise_multiplier ** 2 * total)


def contributions(paths: ArrayLike, cap: int | None, n: int) -> np.ndarray:
    """Which steps bear a gradient: a node's first `cap` visits of its walk (all if cap is None), along the last
    axis of `paths` (one path or a stack of them); later visits add noise only."""
    paths = np.asarray(paths, dtype=np.int64)
    if cap is None:
        return np.ones(paths.shape, dtype=bool)
    if cap < 0:
        raise ValueError(f"cap must be >= 0 or None, got {cap}")
    if paths.size == 0:
        return np.zeros(paths.shape, dtype=bool)
    walks = paths.reshape(-1, paths.shape[-1])
    visitor = (np.arange(len(walks))[:, None] * n + walks).ravel()  # (walk, node) of every step, in time order
    order = np.argsort(visitor, kind="stable")
    grouped = visitor[order]
    rank = np.empty(visitor.size, dtype=np.int64)  # how many earlier visits of the same node on the same walk
    rank[order] = np.arange(visitor.size) - np.searchsorted(grouped, grouped, side="left")
    return (rank < cap).reshape(paths.shape)


@dataclass(frozen=True)
class _Segments:
    """Every (gradient step of u, observer v) where v sees the step, over a batch of walks, sorted by segment, then
    step. A segment is u's steps between two consecutive observations of v (v knows θ after its own steps): `seen`
    is the observation r that first follows them, `start` the first step after v's observation before (0 for the
    first one); `first` indexes each segment's first row."""

    walk: np.ndarray
    source: np.ndarray
    observer: np.ndarray
    step: np.ndarray
    seen: np.ndarray
    start: np.ndarray
    first: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(np.append(self.first, len(self.step)))


def _segments(paths: np.ndarray, contributes: np.ndarray, n: int, observers: np.ndarray) -> _Segments:
    """The segments of `observers` on every walk of `paths` (count, T). Every visit is a key (walk · n + node) ·
    (T + 1) + time, sorted between two sentinels; a gradient step s of u is looked up among v's visits as the first
    key after its own (walk, v, s): v's next visit if that key is still v's on that walk (steps after v's last
    visit are unseen), and the key before it is v's previous visit if it is v's at all."""
    count, steps = paths.shape
    span = steps + 1
    visits = np.concatenate(([-1], np.sort(((np.arange(count)[:, None] * n + paths) * span
                                            + np.arange(steps)).ravel()), [count * n * span]))
    walk, step = np.nonzero(contributes)
    source = paths[walk, step]
    base = (walk[:, None] * n + observers) * span  # [gradient step, observer]: where v's visits on that walk begin
    at = np.searchsorted(visits, base + step[:, None], side="right")
    row, column = np.nonzero((visits[at] < base + span) & (source[:, None] != observers))
    at, base = at[row, column], base[row, column]
    seen, before = visits[at] - base, visits[at - 1] - base
    start = np.where(before >= 0, before + 1, 0)
    key = (base + seen) * n + source[row]
    order = np.argsort(key, kind="stable")  # rows come step by step, so a segment's steps stay in time order
    key = key[order]
    boundary = np.ones(key.size, dtype=bool)
    boundary[1:] = key[1:] != key[:-1]
    return _Segments(walk[row][order], source[row][order], observers[column][order], step[row][order],
                     seen[order], start[order], np.flatnonzero(boundary))


def _taut_strings(points: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """min Σ a_i² over Feldman et al.'s schedules (Σ_{i≤t} a_i ≤ Σ_{i≤t} s_i, equal at r − 1) per segment, from
    `points` [segment, j] = s_j − 1 (u's unit shifts, j < k) and r − 1 (j = k = sizes), padding beyond: the lower
    convex hull of the cumulative shifts (x, j), each piece costing rise²/run. Gift wrapping: from each hull vertex
    the next one is the point of least slope."""
    columns = np.arange(points.shape[1])
    cost = np.zeros(len(points))
    vertex = np.zeros(len(points), dtype=np.int64)
    active = np.arange(len(points))
    while active.size:
        x, at, rows = points[active], vertex[active], np.arange(active.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = (columns - at[:, None]) / (x - x[rows, at][:, None])
        slope[(columns <= at[:, None]) | (columns > sizes[active][:, None])] = np.inf
        following = np.argmin(slope, axis=1)
        cost[active] += (following - at) ** 2 / (x[rows, following] - x[rows, at])
        vertex[active] = following
        active = active[following < sizes[active]]
    return cost


def _segment_costs(segments: _Segments, rule: PathRule) -> np.ndarray:
    """Each segment's σ-free loss under `rule` (see `path_geometry`)."""
    first, sizes = segments.first, segments.sizes
    if rule == "segment":
        return sizes**2 / (segments.seen[first] - segments.start[first])
    single = 1.0 / (segments.seen - segments.step)
    if rule == "per_step":
        return np.add.reduceat(single, first)
    cost = single[first]
    size_class = np.ceil(np.log2(np.maximum(sizes, 1))).astype(np.int64)  # k in (2^(c−1), 2^c]
    owner = np.repeat(np.arange(first.size), sizes)
    for level in range(1, size_class.max(initial=0) + 1):  # segments of several steps, one size class at a time
        chosen = np.flatnonzero(size_class == level)
        if chosen.size:
            points = np.full((chosen.size, sizes[chosen].max() + 1), np.inf)
            rows = np.flatnonzero(size_class[owner] == level)
            points[np.searchsorted(chosen, owner[rows]), rows - first[owner[rows]]] = segments.step[rows] - 1
            points[np.arange(chosen.size), sizes[chosen]] = segments.seen[first[chosen]] - 1
            cost[chosen] = _taut_strings(points, sizes[chosen])
    return cost


def path_geometry(paths: ArrayLike, contributes: ArrayLike, n: int, rule: PathRule = "amplification") -> np.ndarray:
    """σ-free loss [walk, u, v] of every walk of `paths` (count, T), conditioned on its path: its RDP is
    α (Δ/σ)² g / 2. `rule`: "amplification" (`realized_path_rdp`), "per_step" (its `joint=False`) or "segment"
    (`segment_exact_rdp`). The diagonal is 0. Observers go in blocks of at most BATCH_ENTRIES (step, observer)
    rows, so memory stays bounded whatever n and T are."""
    paths, contributes = np.asarray(paths, dtype=np.int64), np.asarray(contributes, dtype=bool)
    count = len(paths)
    block = max(1, BATCH_ENTRIES // max(1, int(np.count_nonzero(contributes))))
    geometry = np.zeros(count * n * n)
    for low in range(0, n, block):
        segments = _segments(paths, contributes, n, np.arange(low, min(n, low + block)))
        cost = _segment_costs(segments, rule)
        cell = (segments.walk[segments.first] * n + segments.source[segments.first]) * n
        geometry += np.bincount(cell + segments.observer[segments.first], weights=cost, minlength=geometry.size)
    return geometry.reshape(count, n, n)


def _path_inputs(path, contributes, n):
    path = np.asarray(path, dtype=np.int64)
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
    geometry = path_geometry(path[None], contributes[None], n, "amplification" if joint else "per_step")[0]
    return _nan_diagonal(alpha * sensitivity ** 2 / (2 * sigma ** 2) * geometry)


def segment_exact_rdp(path: Sequence[int], contributes: Sequence[bool], n: int, alpha: float,
                      sigma: float, sensitivity: float) -> np.ndarray:
    """Exact Gaussian divergence of v's view in the linearized (matrix-factorization) model: every step's
    gradient is a fixed input bounded by Δ, only u's differ. Exact for gradients that do not depend on the
    model; no bound on a run whose gradients do: on the walk [v, w, u, v] with u's gradient hθ − a_u (its step
    θ ↦ (1 − γh)θ + γ(a_u − η)) the run reveals α Δ²/(2σ²(1 + (1 − γh)²)), up to αΔ²/(2σ²) at γh = 1,
    where this gives αΔ²/(4σ²).

    v knows θ_0 = 0 and its own gradients and noise, so its view is equivalent to independent sums
    over the segments of steps strictly between consecutive observations (and [0, first one)).
    With c of u's gradient steps among k steps, the worst case aligns them: α (cΔ)²/(2σ² k) per
    segment, summed; steps after v's last observation are unseen.

    Against `realized_path_rdp`: this is never larger (Cauchy–Schwarz on the schedule), but it is a
    different model, not a tighter bound. Path [w, u, v]: αΔ²/(4σ²) here, since w's earlier noise
    also hides u's gradient in the sum v sees; amplification by iteration gives αΔ²/(2σ²), because a
    non-expansive step of u (e.g. x ↦ const) may erase earlier noise, as the walk above shows. Path [u, u, v]: both give
    αΔ²/σ², and the paper-style per-contribution sum (joint=False) gives 3αΔ²/(4σ²) < exact.
    """
    path, contributes = _path_inputs(path, contributes, n)
    geometry = path_geometry(path[None], contributes[None], n, "segment")[0]
    return _nan_diagonal(alpha * sensitivity ** 2 / (2 * sigma ** 2) * geometry)


def estrada_communicability(adjacency: np.ndarray) -> np.ndarray:
    """Estrada–Hatano communicability expm(A) (Definition 8 with c_i = 1/i!), for the Fig. 3 heatmap."""
    return scipy.linalg.expm(np.asarray(adjacency, dtype=float))
