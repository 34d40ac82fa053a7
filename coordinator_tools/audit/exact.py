"""The "exact" column: the Gaussian divergence of an observer's whole view.

Reads the run's `LinearGaussianModel` (see `core`). In the one-draw-per-input case (every
Muffliato protocol) v's view is K_v z with z = x + η; changing x_u by Δ shifts the view's
mean by Δ K e_u against noise of covariance σ² K Kᵀ, so

    μ_{u→v} = (Δ/σ) · ‖Π_v e_u‖,   Π_v the orthogonal projection onto the row space of K_v,

and ε(α) = α μ²/2. The geometry p = ‖Π_v e_u‖² ∈ [0, 1] does not depend on σ; it is computed
once and scaled (calibration reuses it). p = 1 means v can solve for u's noisy input exactly.
Other models (several draws, unequal σ) go through `core.gaussian_geometry`.

Numerics must not understate: small graphs use exact rational arithmetic (the rows converge
to 11ᵀ/n, so a float rank cut-off can silently drop real directions); larger graphs get an
interval [p at the standard rank tolerance, p at a tolerance near machine precision plus a
first-order rounding bound], and pairs whose two ends differ are flagged ill-conditioned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from flint import fmpq, fmpq_mat

from coordinator_tools.audit.conversion import squared_mu
from coordinator_tools.audit.core import EPS, FINE_RTOL, LinearGaussianModel, gaussian_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.views import ObserverView, observer_views

Method = Literal["auto", "rational", "float"]
MethodName = Literal["rational", "float-interval", "float-interval (general)"]

# Largest graph accounted in rational arithmetic by default: n = 48 takes about 1.5 s
# (small-world graph, 10 accelerated rounds), n = 64 3-8 s, n = 96 over 100 s.
RATIONAL_MAX_NODES = 48
# p within this of 1 (float) means v reconstructs u's noisy input.
RECONSTRUCT_TOL = 1e-9
# Flag a pair when its interval is wider than RTOL of its lower end plus ATOL (ATOL in units
# of the local-DP loss: differences below it change no reported digit that matters).
ILL_CONDITIONED_RTOL = 1e-3
ILL_CONDITIONED_ATOL = 1e-12


@dataclass(frozen=True)
class ViewGeometry:
    """p for every pair (‖Π_v e_u‖² for one draw per input), arrays [u, v]; NaN where u is (in) the observer.

    ``lower`` is at the standard rank tolerance, ``upper`` near machine precision plus a
    rounding bound; both are the exact value when ``method`` is "rational".
    """

    lower: np.ndarray
    upper: np.ndarray
    reconstructable: np.ndarray
    ill_conditioned: np.ndarray
    method: MethodName


def view_geometry(
    model: LinearGaussianModel, threat_model: ThreatModel = ThreatModel(), *, method: Method = "auto"
) -> ViewGeometry:
    """The σ-free geometry of every observer's view, exactly or as a float interval."""
    views = observer_views(model, threat_model)
    if not model.shared:
        if method == "rational":
            raise ValueError("rational arithmetic needs a model with one noise draw per input")
        return _general_geometry(model, views)
    if method == "auto":
        small = model.n <= RATIONAL_MAX_NODES and model.exact_rows is not None
        method = "rational" if small else "float"
    n = model.n
    lower = np.full((n, n), np.nan)
    upper = np.full((n, n), np.nan)
    reconstructable = np.zeros((n, n), dtype=bool)
    if method == "rational":
        if model.exact_rows is None:
            raise ValueError("this model has no rational rows")
        rows = model.exact_rows()
        for v, view in enumerate(views):
            exact = _rational_projection(rows, view)
            _scatter(lower, v, view, [float(p) for p in exact])
            _scatter(reconstructable, v, view, [p == 1 for p in exact])
        return ViewGeometry(lower, lower.copy(), reconstructable, np.zeros((n, n), dtype=bool), "rational")
    for v, view in enumerate(views):
        low, high = _float_projection(view.rows(model.inputs))
        _scatter(lower, v, view, low)
        _scatter(upper, v, view, high)
        _scatter(reconstructable, v, view, low >= 1 - RECONSTRUCT_TOL)
    return ViewGeometry(lower, upper, reconstructable, _ill_conditioned(lower, upper), "float-interval")


def exact_mu(geometry: ViewGeometry, *, sigma: float, sensitivity: float) -> tuple[np.ndarray, np.ndarray]:
    """(μ at the lower end, μ at the upper end) of every pair at noise σ."""
    return tuple(  # type: ignore[return-value]
        np.sqrt(squared_mu(p, sigma=sigma, sensitivity=sensitivity)) for p in (geometry.lower, geometry.upper)
    )


def _general_geometry(model: LinearGaussianModel, views: list[ObserverView]) -> ViewGeometry:
    """p from the general formula; `reconstructable` is defined for one-draw-per-input models only."""
    n = model.n
    lower = np.full((n, n), np.nan)
    upper = np.full((n, n), np.nan)
    for v, view in enumerate(views):
        low, high = gaussian_geometry(*view.matrices(model))
        lower[view.sources(), v] = low
        upper[view.sources(), v] = high
    none = np.zeros((n, n), dtype=bool)
    return ViewGeometry(lower, upper, none, _ill_conditioned(lower, upper), "float-interval (general)")


def _ill_conditioned(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Pairs whose interval is wider than ILL_CONDITIONED_RTOL of its lower end (plus ATOL)."""
    with np.errstate(invalid="ignore"):
        return upper - lower > ILL_CONDITIONED_RTOL * lower + ILL_CONDITIONED_ATOL


def _scatter(target: np.ndarray, observer: int, view: ObserverView, values: object) -> None:
    """Write per-hidden-column values into column `observer`, for the view's sources only."""
    values = np.asarray(values)
    hidden = view.hidden
    keep = [i for i, k in enumerate(hidden) if k not in view.observers]
    target[[hidden[i] for i in keep], observer] = values[keep]


def _float_projection(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p for every column of K: (at the standard rank tolerance, conservative upper end).

    The upper end keeps every direction above FINE_RTOL · σ_max and adds the first-order
    (Wedin) bound on how far rounding can turn the kept subspace: backward error
    ‖E‖ ≈ max(m, h) · eps · σ_max over the gap between the last kept and first dropped
    singular value. Without it, views with singular values near 1e-10 understate p by ~1e-6.
    """
    width = rows.shape[1]
    if rows.shape[0] == 0:
        return np.zeros(width), np.zeros(width)
    _, singular, right = np.linalg.svd(rows, full_matrices=False)
    energy = np.square(right)
    backward_error = singular[0] * max(rows.shape) * EPS
    standard = int(np.sum(singular > backward_error))
    fine = int(np.sum(singular > singular[0] * FINE_RTOL))
    dropped = singular[fine] if fine < singular.size else 0.0
    turn = backward_error / (singular[fine - 1] - dropped) if fine else 0.0
    silent = ~np.any(rows != 0, axis=0)  # a column the view never depends on reveals nothing
    lower = energy[:standard].sum(axis=0)
    upper = energy[:fine].sum(axis=0) + turn
    return np.where(silent, 0.0, np.minimum(1.0, lower)), np.where(silent, 0.0, np.minimum(1.0, upper))


def _rational_projection(rows: fmpq_mat, view: ObserverView) -> list[fmpq]:
    """p for every hidden column, exactly, from the reduced row echelon form R of K.

    With R = [I | F] up to a column permutation, the row space has basis [I | F] and the null
    space [−Fᵀ | I]; p is the diagonal of the row-space projection, or one minus that of the
    null-space projection, whichever needs the smaller Gram matrix (entries run to thousands of
    digits, so the Gram's size sets the cost).
    """
    hidden = view.hidden
    width = len(hidden)
    if not view.messages:
        return [fmpq(0)] * width
    stacked = fmpq_mat(len(view.messages), width, [rows[i, k] for i in view.messages for k in hidden])
    reduced, rank = stacked.rref()
    if rank == 0:
        return [fmpq(0)] * width
    pivots = [next(k for k in range(width) if reduced[i, k] != 0) for i in range(rank)]
    pivot_set = set(pivots)
    free = [k for k in range(width) if k not in pivot_set]
    if rank <= len(free):
        rows = fmpq_mat(rank, width, [reduced[i, k] for i in range(rank) for k in range(width)])
        return _projection_diagonal(rows)
    null = fmpq_mat(len(free), width)
    for j, f in enumerate(free):
        null[j, f] = 1
        for i, p in enumerate(pivots):
            null[j, p] = -reduced[i, f]
    return [1 - p for p in _projection_diagonal(null)]


def _projection_diagonal(basis: fmpq_mat) -> list[fmpq]:
    """diag(Bᵀ (B Bᵀ)⁻¹ B): squared norms of the unit vectors projected on B's row space."""
    if basis.nrows() == 0:
        return [fmpq(0)] * basis.ncols()
    solved = (basis * basis.transpose()).solve(basis, algorithm="dixon")
    rows = range(basis.nrows())
    return [sum((basis[i, k] * solved[i, k] for i in rows), fmpq(0)) for k in range(basis.ncols())]
