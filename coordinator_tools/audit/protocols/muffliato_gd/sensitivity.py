"""The "exact" column of a learning run: the matrix-factorization sensitivity of every pair (u → v).

Observer v (or its coalition) sees the rows K_v of the unrolled run (`unrolled`) and knows its own
gradients and, by default, its own noise (those columns are deleted). Moving u's gradients by
δ = (δ_0, …, δ_{T−1}) shifts v's view by K_v E_u δ against noise of covariance σ² K_v K_vᵀ, E_u
u's T columns; since A = B, μ² = δᵀ X δ / σ² with X = E_uᵀ Π E_u, Π the orthogonal projection on
the row space of K_v in the noise coordinates. With each step's difference bounded by Δ
(‖δ_s‖ ≤ Δ; which Δ the run uses — 2C for a whole local dataset, 2C/m for one of m examples —
is the caller's), sens²_u = max δᵀXδ, and ε(α) = α μ²/2 with μ = sens/σ:

* upper: Δ² min(Σ_ij |X_ij|, T λ_max(X)), valid for vector gradients too. When X ≥ 0 entrywise
  (the common case) the aligned δ (the same unit vector every step) attains Σ_ij X_ij, so the
  upper end is the exact value; otherwise the scalar problem is a box-constrained QP and the
  vector one an SDP, and only the interval is reported.
* lower: the best sign vector δ = Δ s (every one for T ≤ ENUMERATED_STEPS, which is the exact
  optimum for scalar gradients; a local search beyond). Scalar gradients attain it, so it is
  below the true value in any dimension; vector gradients can exceed it (X = I − 11ᵀ/3: signs give
  8/3, three unit vectors at 120° give 3), so reports should lead with the upper end.

X is a block of a projection, so sens² ≤ TΔ², the local-DP value (every step seen directly); the
upper end is capped there. Values are σ-free, in units of Δ² (like `exact`'s p): q = sens²/Δ² ∈ [0, T].

Numerics, as `exact._float_projection` (never understate): the lower end uses X at the standard
rank cut-off, the upper end X at the fine cut-off plus the first-order rounding bound on Π;
pairs where the cut-off moves the value are flagged ill-conditioned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from coordinator_tools.audit.conversion import squared_mu
from coordinator_tools.audit.core import EPS, FINE_RTOL
from coordinator_tools.audit.exact import ILL_CONDITIONED_ATOL, ILL_CONDITIONED_RTOL
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import UnrolledRun
from coordinator_tools.audit.views import coalition

# Entries of X above −NONNEGATIVE_ATOL count as ≥ 0 (rounding leaves ~1e-17 where X is truly 0).
NONNEGATIVE_ATOL = 1e-12
# Up to this many steps the lower end tries every sign vector (2^(T−1) of them, s and −s alike).
ENUMERATED_STEPS = 12
# A sign flip must raise δᵀXδ by more than this to be taken (so the search ends).
FLIP_GAIN = 1e-12


@dataclass(frozen=True)
class ObserverBlocks:
    """X_u = E_uᵀ Π E_u of one observer for every node u (meaningless for the observers): (n, T, T) each."""

    observers: tuple[int, ...]
    standard: np.ndarray  # at the standard rank cut-off
    fine: np.ndarray  # at the fine rank cut-off
    rounding: float  # first-order bound on ‖Π̃ − Π‖₂ at the fine cut-off


def observer_blocks(run: UnrolledRun, observer: int, threat_model: ThreatModel = ThreatModel()) -> ObserverBlocks:
    """The T×T blocks of the projection on `observer`'s view (or its coalition's), one per node."""
    n, steps = run.n, run.steps
    members = coalition(observer, threat_model, n)
    rows = run.rows[sorted({i for member in members for i in run.received[member]})]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    view = (rows / np.where(norms > 0, norms, 1.0)).reshape(-1, n, steps)
    if threat_model.observer_knows_own_noise:
        view[:, list(members)] = 0.0  # deleting known columns, without renumbering the others
    standard, fine, rounding = _row_space(view.reshape(-1, n * steps))
    return ObserverBlocks(members, _blocks(standard, n, steps), _blocks(fine, n, steps), rounding)


def aligned_upper(blocks: np.ndarray) -> np.ndarray:
    """min(Σ_ij |X_ij|, T λ_max(X)) for a stack of PSD blocks (…, T, T): max δᵀXδ over ‖δ_s‖ ≤ 1 is below it."""
    steps = blocks.shape[-1]
    return np.minimum(np.abs(blocks).sum(axis=(-2, -1)), steps * np.linalg.eigvalsh(blocks)[..., -1])


def sign_lower(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(max sᵀXs over the sign vectors s tried, that s) for a stack of blocks (p, T, T).

    For T ≤ ENUMERATED_STEPS every sign vector: the exact optimum for scalar gradients (a convex
    function peaks at a vertex of the box). Beyond, a local search from the aligned s = 1 and from
    the signs of X's top eigenvector, flipping single signs while one raises the value (flipping
    s_i changes sᵀXs by 4 (X_ii − s_i (Xs)_i)).
    """
    count, steps = blocks.shape[:2]
    if steps <= ENUMERATED_STEPS:
        signs = 1.0 - 2.0 * ((np.arange(2 ** (steps - 1))[:, None] >> np.arange(steps)) & 1)  # s_0 = +1
        values = np.einsum("cs,pst,ct->pc", signs, blocks, signs, optimize=True)
        choice = np.argmax(values, axis=1)
        return values[np.arange(count), choice], signs[choice]
    _, vectors = np.linalg.eigh(blocks)
    signs = np.stack([np.ones((count, steps)), np.where(vectors[..., -1] >= 0, 1.0, -1.0)])
    diagonal = np.diagonal(blocks, axis1=-2, axis2=-1)
    while True:
        gains = 4 * (diagonal - signs * np.einsum("pst,cpt->cps", blocks, signs))
        best = np.argmax(gains, axis=-1)
        improve = np.take_along_axis(gains, best[..., None], axis=-1)[..., 0] > FLIP_GAIN
        if not improve.any():
            break
        start, pair = np.nonzero(improve)
        signs[start, pair, best[start, pair]] *= -1
    values = np.einsum("cps,pst,cpt->cp", signs, blocks, signs)
    choice = np.argmax(values, axis=0)
    picked = np.arange(count)
    return values[choice, picked], signs[choice, picked]


@dataclass(frozen=True)
class GradientSensitivity:
    """sens²_{u→v}/Δ² of every pair, arrays [u, v] (NaN where u observes): an interval and how good it is."""

    steps: int
    lower: np.ndarray  # attained by the sign vector `directions[u, v]`
    upper: np.ndarray  # Δ²-free min(Σ|X|, T λ_max), rounding included, capped at T
    aligned: np.ndarray  # bool: X ≥ 0, so the aligned δ attains the upper bound (exact up to rounding)
    ill_conditioned: np.ndarray  # bool: the rank cut-off moves the value
    directions: np.ndarray  # (n, n, T) int8 signs of the δ attaining `lower`; 0 where u observes

    @property
    def ldp(self) -> float:
        """The local-DP value T (every step's noisy gradient seen directly), in the same units."""
        return float(self.steps)


def gradient_sensitivity(run: UnrolledRun, threat_model: ThreatModel = ThreatModel()) -> GradientSensitivity:
    """The MF sensitivity interval of every pair (u → v) of the run."""
    n, steps = run.n, run.steps
    lower, upper = np.full((n, n), np.nan), np.full((n, n), np.nan)
    aligned, ill_conditioned = np.zeros((n, n), dtype=bool), np.zeros((n, n), dtype=bool)
    directions = np.zeros((n, n, steps), dtype=np.int8)
    for v in range(n):
        blocks = observer_blocks(run, v, threat_model)
        sources = [u for u in range(n) if u not in blocks.observers]
        standard, fine = blocks.standard[sources], blocks.fine[sources]
        slack = steps * blocks.rounding  # |δᵀEδ| ≤ T ‖E‖₂ and Σ|E_ij| ≤ T ‖E‖₂ for ‖δ_s‖ ≤ 1
        low, signs = sign_lower(standard)
        lower[sources, v] = low
        upper[sources, v] = np.minimum(aligned_upper(fine) + slack, steps)
        aligned[sources, v] = np.all(np.minimum(standard, fine) >= -NONNEGATIVE_ATOL, axis=(1, 2))
        moved = np.abs(fine - standard).sum(axis=(1, 2)) + slack
        ill_conditioned[sources, v] = moved > ILL_CONDITIONED_RTOL * low + ILL_CONDITIONED_ATOL
        directions[sources, v] = signs
    return GradientSensitivity(steps, lower, upper, aligned, ill_conditioned, directions)


def renyi(geometry: ArrayLike, *, alpha: float, sigma: float, sensitivity: float) -> np.ndarray:
    """ε(α) = α μ²/2 with μ² = (Δ/σ)² · q, for q = sens²/Δ² (or any σ-free factor of this package)."""
    return alpha * squared_mu(geometry, sigma=sigma, sensitivity=sensitivity) / 2


def _row_space(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(orthonormal basis of the row space at the standard cut-off, at the fine one, rounding bound).

    As `exact._float_projection`: the backward error max(m, N)·eps·σ_max sets the standard cut-off
    and, over the gap at the fine cut-off, the first-order (Wedin) bound on how far rounding
    turns the kept subspace.
    """
    if rows.size == 0 or not np.any(rows):
        return np.zeros((0, rows.shape[1])), np.zeros((0, rows.shape[1])), 0.0
    _, singular, right = np.linalg.svd(rows, full_matrices=False)
    backward_error = singular[0] * max(rows.shape) * EPS
    standard = int(np.sum(singular > backward_error))
    fine = max(standard, int(np.sum(singular > singular[0] * FINE_RTOL)))
    dropped = singular[fine] if fine < singular.size else 0.0
    return right[:standard], right[:fine], float(backward_error / (singular[fine - 1] - dropped))


def _blocks(basis: np.ndarray, n: int, steps: int) -> np.ndarray:
    """E_uᵀ (basisᵀ basis) E_u for every node u: (n, T, T)."""
    per_node = basis.reshape(-1, n, steps)
    return np.einsum("rus,rut->ust", per_node, per_node)
