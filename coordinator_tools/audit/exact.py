"""The "exact" column: the Gaussian divergence of an observer's whole view.

Reads the run's `LinearGaussianModel` (see `core`). In the one-draw-per-input case (every
Muffliato protocol) v's view is K_v z with z = x + η; changing x_u by Δ shifts the view's
mean by Δ K e_u against noise of covariance σ² K Kᵀ, so

    μ_{u→v} = (Δ/σ) · ‖Π_v e_u‖,   Π_v the orthogonal projection onto the row space of K_v,

and ε(α) = α μ²/2. The geometry p = ‖Π_v e_u‖² ∈ [0, 1] does not depend on σ; it is computed
once and scaled (calibration reuses it). p = 1 means v can solve for u's noisy input exactly.
Other models (several draws, unequal σ) go through `core.gaussian_geometry`.

Numerics must not understate. Small graphs use exact rational arithmetic. Larger ones get a
certified float interval per observer, from a well-conditioned basis of the view's row space
(the model's `SpanBasis`: a block Krylov basis for Muffliato; else the raw rows' SVD, whose
small singular values fall below rounding because the rows converge to 11ᵀ/n):

* the basis spans, within angle θ, a subspace of the exact row space, so p ≥ p̂ − θ always;
* if its dimension is the exact rank, the two spaces coincide and p ≤ p̂ + θ. The rank is
  certified by the float alone when the basis has a direction per row (or fills the space),
  else by a modular rank (`modular`: exact rows mod random primes, never above the rank);
* otherwise a real direction lies below rounding: the observer is "unresolved", accounted in
  rational arithmetic when that is affordable (ESCALATION_MAX_NODES), else given p ≤ 1.

Pairs whose interval is wider than a digit that matters are flagged ill-conditioned.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from flint import fmpq, fmpq_mat
from threadpoolctl import threadpool_limits

from coordinator_tools.audit.conversion import squared_mu
from coordinator_tools.audit.core import (
    EPS,
    LinearGaussianModel,
    SpanBasis,
    gaussian_geometry,
    gram_geometry,
)
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.modular import (
    PRIMES,
    SKETCH_MARGIN,
    modular_rank,
    random_prime,
    sketch_columns,
)
from coordinator_tools.audit.progress import tracked
from coordinator_tools.audit.views import ObserverView, observer_views

Method = Literal["auto", "rational", "float"]
# "reachable steps": a learning run's proven bound (`reachable`), no projection at all.
MethodName = Literal["rational", "float-interval", "float-interval + rational", "float-interval (general)",
                    "reachable steps"]

# Largest graph accounted in rational arithmetic by default: n = 48 takes about 1.5 s
# (small-world graph, 10 accelerated rounds), n = 64 3-8 s, n = 96 over 100 s.
RATIONAL_MAX_NODES = 48
# Largest graph whose unresolved observers "auto" accounts in rational arithmetic (a 64-node
# ring's unresolved observers take about a second in all).
ESCALATION_MAX_NODES = 128
# p̂ within this of 1 (float) means v reconstructs u's noisy input (the interval's ends are looser).
RECONSTRUCT_TOL = 1e-9
# Flag a pair when its interval is wider than RTOL of its lower end plus ATOL (ATOL in units
# of the local-DP loss: differences below it change no reported digit that matters).
ILL_CONDITIONED_RTOL = 1e-3
ILL_CONDITIONED_ATOL = 1e-12


@dataclass(frozen=True)
class ViewGeometry:
    """p for every pair (‖Π_v e_u‖² for one draw per input), arrays [u, v]; NaN where u is (in) the observer.

    ``lower`` ≤ p ≤ ``upper``; both are the exact value when ``method`` is "rational".
    ``unresolved`` lists the observers whose rank float and modular arithmetic could not
    settle (accounted in rational arithmetic under "float-interval + rational", else p ≤ 1).
    """

    lower: np.ndarray
    upper: np.ndarray
    reconstructable: np.ndarray
    ill_conditioned: np.ndarray
    method: MethodName
    unresolved: tuple[int, ...] = ()


@dataclass(frozen=True)
class _FloatProjection:
    """p̂ per hidden column from a float basis of dimension ``rank``, within ``error`` of a subspace."""

    p: np.ndarray
    error: float
    rank: int
    certified: bool  # the exact rank is ``rank``
    silent: np.ndarray  # hidden columns the view never depends on: p is exactly 0


def view_geometry(
    model: LinearGaussianModel, threat_model: ThreatModel = ThreatModel(), *, method: Method = "auto"
) -> ViewGeometry:
    """The σ-free geometry of every observer's view, exactly or as a certified float interval."""
    views = observer_views(model, threat_model)
    if not model.shared:
        if method == "rational":
            raise ValueError("rational arithmetic needs a model with one noise draw per input")
        return _general_geometry(model, views)
    escalate = method == "auto" and model.exact_rows is not None and model.n <= ESCALATION_MAX_NODES
    if method == "auto":
        small = model.n <= RATIONAL_MAX_NODES and model.exact_rows is not None
        method = "rational" if small else "float"
    if method == "rational":
        if model.exact_rows is None:
            raise ValueError("this model has no rational rows")
        return _rational_geometry(model, views, range(model.n))
    with threadpool_limits(limits=1, user_api="blas"):  # thin per-view products: threads only contend
        projections = [_float_projection(model, view) for view in tracked(views, "exact: views", len(views))]
    projections = _certify(model, views, projections)
    unresolved = [v for v, projection in enumerate(projections) if not projection.certified]
    n = model.n
    lower = np.full((n, n), np.nan)
    upper = np.full((n, n), np.nan)
    reconstructable = np.zeros((n, n), dtype=bool)
    for v, (view, projection) in enumerate(zip(views, projections)):
        low = np.clip(projection.p - projection.error, 0.0, 1.0)
        high = np.clip(projection.p + projection.error, 0.0, 1.0) if projection.certified else np.ones_like(low)
        _scatter(lower, v, view, np.where(projection.silent, 0.0, low))
        _scatter(upper, v, view, np.where(projection.silent, 0.0, high))
        _scatter(reconstructable, v, view, projection.p >= 1 - RECONSTRUCT_TOL)
    if escalate and unresolved:
        exact = _rational_geometry(model, views, unresolved)
        lower[:, unresolved] = exact.lower[:, unresolved]
        upper[:, unresolved] = exact.upper[:, unresolved]
        reconstructable[:, unresolved] = exact.reconstructable[:, unresolved]
        return ViewGeometry(lower, upper, reconstructable, ill_conditioned(lower, upper), "float-interval + rational",
                            tuple(unresolved))
    return ViewGeometry(lower, upper, reconstructable, ill_conditioned(lower, upper), "float-interval",
                        tuple(unresolved))


def exact_mu(geometry: ViewGeometry, *, sigma: float, sensitivity: float) -> tuple[np.ndarray, np.ndarray]:
    """(μ at the lower end, μ at the upper end) of every pair at noise σ."""
    return tuple(
        np.sqrt(squared_mu(p, sigma=sigma, sensitivity=sensitivity)) for p in (geometry.lower, geometry.upper)
    )


def _rational_geometry(model: LinearGaussianModel, views: list[ObserverView], observers: Sequence[int]) -> ViewGeometry:
    """The exact p of the given observers' views (other columns NaN), in rational arithmetic."""
    n = model.n
    exact_p = np.full((n, n), np.nan)
    reconstructable = np.zeros((n, n), dtype=bool)
    rows = model.exact_rows()  # type: ignore[misc]
    for v in tracked(observers, "exact: rational views", len(observers)):
        exact = _rational_projection(rows, views[v])
        _scatter(exact_p, v, views[v], [float(p) for p in exact])
        _scatter(reconstructable, v, views[v], [p == 1 for p in exact])
    return ViewGeometry(exact_p, exact_p.copy(), reconstructable, np.zeros((n, n), dtype=bool), "rational")


def _general_geometry(model: LinearGaussianModel, views: list[ObserverView]) -> ViewGeometry:
    """p from the general formula; `reconstructable` is defined for one-draw-per-input models only.

    A view is read from its m × m Gram matrix when that is well conditioned (`core.gram_geometry`), else from
    the SVD of its noise map. Observers with the same messages and the same unknown draws (a coalition's
    members, every column of an eavesdropper) share one view: it is computed once, on every input any of them
    accounts for.
    """
    n = model.n
    lower = np.full((n, n), np.nan)
    upper = np.full((n, n), np.nan)
    groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
    for v, view in enumerate(views):
        groups.setdefault((view.messages, tuple(view.unknown_draws(model))), []).append(v)
    # Many thin per-view products contend for BLAS threads; one large shared view uses them.
    with threadpool_limits(limits=1 if len(groups) > 1 else None, user_api="blas"):
        for observers in tracked(list(groups.values()), "exact: views", len(groups)):
            columns = sorted({u for v in observers for u in views[v].sources()})
            low, high = np.full(n, np.nan), np.full(n, np.nan)
            view = views[observers[0]]
            fast = gram_geometry(*view.gram_matrices(model, columns))
            low[columns], high[columns] = (fast, fast) if fast is not None else gaussian_geometry(
                *view.matrices(model, columns))
            for v in observers:
                sources = views[v].sources()
                lower[sources, v] = low[sources]
                upper[sources, v] = high[sources]
    none = np.zeros((n, n), dtype=bool)
    return ViewGeometry(lower, upper, none, ill_conditioned(lower, upper), "float-interval (general)")


def ill_conditioned(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Pairs whose interval is wider than ILL_CONDITIONED_RTOL of its lower end (plus ATOL)."""
    with np.errstate(invalid="ignore"):
        array: np.ndarray = upper - lower > ILL_CONDITIONED_RTOL * lower + ILL_CONDITIONED_ATOL
        return array


def _scatter(target: np.ndarray, observer: int, view: ObserverView, values: object) -> None:
    """Write per-hidden-column values into column `observer`, for the view's sources only."""
    values = np.asarray(values)
    hidden = view.hidden
    keep = [i for i, k in enumerate(hidden) if k not in view.observers]
    target[[hidden[i] for i in keep], observer] = values[keep]


def _known(view: ObserverView) -> list[int]:
    """The z columns the observer subtracts (its own, or its coalition's, when it knows its noise)."""
    return sorted(view.observers) if view.knows_own_noise else []


def _float_projection(model: LinearGaussianModel, view: ObserverView) -> _FloatProjection:
    """p̂ for every hidden column, from the model's stable basis of the view when it has one."""
    basis = model.span_basis(view.messages) if model.span_basis is not None else None
    if basis is None:
        return _raw_projection(view.rows(model.inputs))
    return _restricted_projection(basis, view)


def _raw_projection(rows: np.ndarray) -> _FloatProjection:
    """p̂ from the SVD of the view's rows K (hidden columns), keeping directions above rounding.

    Rounding in the rows and in the SVD is below ‖E‖ = max(m, h)·eps·‖K‖_F; the kept top-r
    right singular space lies within ‖E‖/s_r of the row space (Wedin, the exact rank being r).
    """
    count, width = rows.shape
    silent = ~np.any(rows != 0, axis=0)  # a column the view never depends on reveals nothing
    if count == 0:
        return _FloatProjection(np.zeros(width), 0.0, 0, True, silent)
    _, singular, right = np.linalg.svd(rows, full_matrices=False)
    noise = max(count, width) * EPS * float(np.linalg.norm(singular))
    rank = int(np.sum(singular > noise))
    error = noise / float(singular[rank - 1]) if rank else 0.0
    p = np.square(right[:rank]).sum(axis=0)
    return _FloatProjection(p, error, rank, rank == min(count, width), silent)


def _restricted_projection(span: SpanBasis, view: ObserverView) -> _FloatProjection:
    """p̂ for every hidden column from an orthonormal basis Q of the view's rows on all n columns.

    Deleting the known columns C leaves Q_h, with Q_hᵀQ_h = I − Q_Cᵀ Q_C: singular values 1 except
    √(1 − s_i²) along the right singular vectors V_i of Q_C. So the projection onto its column
    space is p_u = ‖Q[u]‖² + Σ_i w_i (Q[u]·V_i)², with w_i = s_i²/(1 − s_i²), or −1 for a direction
    whose √(1 − s_i²) is rounding (the known column lies in the span: that direction is dropped).
    """
    basis, hidden, known = span.basis, view.hidden, _known(view)
    size = basis.shape[1]
    rows = basis[hidden]
    p = np.square(rows).sum(axis=1)
    error, rank, certified = span.error, size, span.complete
    if known and size:
        _, singular, right = np.linalg.svd(basis[known], full_matrices=False)
        coordinates = rows @ right.T
        remaining = np.linalg.norm(coordinates, axis=0)  # √(1 − s_i²) without cancellation
        noise = 2 * span.error + size * EPS
        lost = remaining <= noise
        weight = np.where(lost, -1.0, np.square(singular) / np.where(lost, 1.0, np.square(remaining)))
        p = p + np.square(coordinates) @ weight
        rank -= int(lost.sum())
        certified = certified and not lost.any()
        error = noise / float(remaining[~lost].min()) if (~lost).any() else noise
    silent = ~np.any(rows != 0, axis=1)
    return _FloatProjection(np.clip(p, 0.0, 1.0), error, rank, certified or rank == len(hidden), silent)


def _certify(model: LinearGaussianModel, views: list[ObserverView],
             projections: list[_FloatProjection]) -> list[_FloatProjection]:
    """Certify the float ranks the float alone cannot, by modular ranks of the exact rows.

    rank([K; E_C]) − |C| is the rank of the view on its hidden columns; each prime's value is a
    lower bound, so a match with the float's rank (itself a lower bound) settles it. A sketch
    needs only a few columns more than the rank it checks: any excess shows as a larger rank.
    """
    pending = [v for v, projection in enumerate(projections) if not projection.certified]
    if not pending or model.sketch is None:
        return projections
    rng = random.SystemRandom()
    width = max(projections[v].rank + len(_known(views[v])) for v in pending) + SKETCH_MARGIN
    best = dict.fromkeys(pending, -1)
    for _ in range(PRIMES):
        prime = random_prime(rng)
        columns = sketch_columns(model.n, width, prime, rng)
        sketched = model.sketch(prime, columns)
        for v in tracked(pending, "exact: modular ranks", len(pending)):
            view, known = views[v], _known(views[v])
            used = projections[v].rank + len(known) + SKETCH_MARGIN
            stacked = np.vstack([sketched[list(view.messages), :used], columns[known, :used]])
            best[v] = max(best[v], modular_rank(stacked, prime) - len(known))
    return [replace(projection, certified=True) if best.get(v) == projection.rank else projection
            for v, projection in enumerate(projections)]


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
    # python-flint's stubs leave out solve's `algorithm` argument, which its fmpq_mat.solve takes.
    solved = (basis * basis.transpose()).solve(basis, algorithm="dixon")  # type: ignore[call-arg]
    rows = range(basis.nrows())
    return [sum((basis[i, k] * solved[i, k] for i in rows), fmpq(0)) for k in range(basis.ncols())]
