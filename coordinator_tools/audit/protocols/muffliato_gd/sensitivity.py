"""The "linearized" column of a learning run: the matrix-factorization sensitivity of every pair (u → v).

It holds every node's gradient fixed, which a run does not (its gradients are taken at models that
carry hidden noise): exact for that model, and no bound on what v learns in a run (`audit.reachable`).

Observer v (or its coalition) sees the rows K_v of the unrolled run (`unrolled`) and knows its own
gradients and, by default, its own noise (those columns are deleted). Moving u's gradients by
δ = (δ_0, …, δ_{T−1}) shifts v's view by K_v E_u δ against noise of covariance σ² K_v K_vᵀ, E_u
u's T columns; since A = B, μ² = δᵀ X δ / σ² with X = E_uᵀ Π E_u, Π the orthogonal projection on
the row space of K_v in the noise coordinates. With each step's difference bounded by Δ
(‖δ_s‖ ≤ Δ; which Δ the run uses — 2C for a whole local dataset, 2C/m for one of m examples —
is the caller's) and every gradient a vector of R^D (the model's dimension; the noise is drawn
per coordinate), sens²_u = max Σ_st X_st ⟨δ_s, δ_t⟩, and ε(α) = α μ²/2 with μ = sens/σ.

The steps need not move in one direction: X = I − 11ᵀ/3 gives 8/3 with the best signs and 3 with
three unit vectors at 120°. `directions` computes the worst case over per-step directions as a
certified interval: the upper end is a proof (weak duality, whatever the search found), the lower
end is reached by real gradients. They meet when X ≥ 0 entrywise (the common case: the aligned
steps reach Σ_ij X_ij), for scalar gradients over T ≤ 12 steps, and, up to the search's
convergence, for D ≥ r with r(r + 1)/2 > T.

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
from coordinator_tools.audit.directions import direction_interval
from coordinator_tools.audit.exact import ILL_CONDITIONED_ATOL, ILL_CONDITIONED_RTOL
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import UnrolledRun
from coordinator_tools.audit.views import coalition

# Pairs whose blocks go to `direction_interval` at once (T² floats each, twice).
BATCH_PAIRS = 2048


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


@dataclass(frozen=True)
class GradientSensitivity:
    """sens²_{u→v}/Δ² of every pair, arrays [u, v] (NaN where u observes): a certified interval (`directions`)."""

    steps: int
    dimension: int  # D: every gradient step of a node is a vector of R^D
    lower: np.ndarray  # reached by real gradient directions in R^D
    upper: np.ndarray  # a proven bound, rounding of Π included, capped at T
    ill_conditioned: np.ndarray  # bool: the rank cut-off moves the value
    directions: np.ndarray  # (n, n, T) int8: the best sign vector of the pair (the canary's); 0 where u observes

    @property
    def ldp(self) -> float:
        """The local-DP value T (every step's noisy gradient seen directly), in the same units."""
        return float(self.steps)


def gradient_sensitivity(run: UnrolledRun, dimension: int,
                         threat_model: ThreatModel = ThreatModel()) -> GradientSensitivity:
    """The MF sensitivity interval of every pair (u → v) of the run, for gradients in R^`dimension`.

    The blocks of several observers go to `direction_interval` together (up to BATCH_PAIRS pairs):
    its search runs on the few blocks the closed forms leave open, and one call for many observers
    costs little more than one for a single observer.
    """
    n, steps = run.n, run.steps
    lower, upper = np.full((n, n), np.nan), np.full((n, n), np.nan)
    ill_conditioned = np.zeros((n, n), dtype=bool)
    directions = np.zeros((n, n, steps), dtype=np.int8)
    pending: list[tuple[int, list[int], ObserverBlocks]] = []
    for v in range(n):
        blocks = observer_blocks(run, v, threat_model)
        pending.append((v, [u for u in range(n) if u not in blocks.observers], blocks))
        if sum(len(sources) for _, sources, _ in pending) < BATCH_PAIRS and v < n - 1:
            continue
        pair = tuple(np.array([[u, w] for w, sources, _ in pending for u in sources], dtype=int).T)
        standard, fine = (np.concatenate([getattr(blocks, end)[sources] for _, sources, blocks in pending])
                          for end in ("standard", "fine"))
        # |Σ E_st ⟨δ_s, δ_t⟩| ≤ ‖E‖₂ Σ ‖δ_s‖² ≤ T ‖E‖₂, E the rounding of Π
        slack = steps * np.array([blocks.rounding for _, sources, blocks in pending for _ in sources])
        interval = direction_interval(standard, fine, dimension)
        lower[pair] = interval.lower
        upper[pair] = np.minimum(interval.upper + slack, steps)
        moved = np.abs(fine - standard).sum(axis=(1, 2)) + slack
        ill_conditioned[pair] = moved > ILL_CONDITIONED_RTOL * interval.lower + ILL_CONDITIONED_ATOL
        directions[pair] = interval.signs
        pending = []
    return GradientSensitivity(steps, dimension, lower, upper, ill_conditioned, directions)


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
