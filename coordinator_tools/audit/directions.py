"""The worst case over a source's per-step directions: a certified interval for its sensitivity.

A source u that contributes at T steps (a learning run's gradient steps) may move each step by
its own δ_s ∈ R^D, ‖δ_s‖ ≤ 1 (in units of the step's sensitivity Δ). An observer whose view,
whitened by its noise, holds u's T columns with Gram matrix X (T×T, PSD) then loses

    sens² = max Σ_st X_st ⟨δ_s, δ_t⟩ = max ⟨X, G⟩ over G ⪰ 0, G_ss ≤ 1, rank G ≤ D,

G the Gram matrix of the δ_s. Moving every step in one direction (G = 11ᵀ) is the worst case
only when X ≥ 0 entrywise: X = I − 11ᵀ/3 gives 0 aligned, 8/3 with the best signs and 3 with
three unit vectors at 120°. Nothing below trusts a solver:

* upper (a proof): weak duality of the relaxation without the rank constraint. Any y with
  Diag(y) − X ⪰ 0 gives ⟨X, G⟩ ≤ ⟨Diag(y), G⟩ ≤ Σ y_s. Σ_t |X_st| (Gershgorin) and λ_max are
  such y; a near-optimal one comes from a barrier method on the dual (`central_path`) and is
  made feasible for the exact matrices by adding λ_min's shortfall, with the eigensolver's
  rounding, to every entry, so the bound holds however well the method converged. For D = 1
  and T ≤ ENUMERATED_STEPS the best sign vector is the exact value (a convex function peaks at
  a vertex of the box), so it is the upper end there.
* lower (a value real gradients reach): the best sign vector (a pattern in any dimension), and
  block coordinate ascent δ_s ← (Σ_{t≠s} X_st δ_t)/‖·‖ in R^min(D, T) from the relaxation's
  primal point (its top eigenvectors: the optimum itself when D is at least its rank). Below
  the rank r where r(r + 1)/2 > T (the relaxation has an optimum of lower rank, Barvinok–Pataki)
  the rank-D problem is hard and has local maxima: more starts (X's top eigenvectors, seeded
  random ones), and the ends may stay apart. From D ≥ r on they meet, up to GAP_RTOL.

Values are in units of Δ² (σ-free); both ends are returned for the caller's own rounding slack
and cap. Blocks may be zero-padded (sources with fewer steps): a zero row is a step that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coordinator_tools.audit.core import EPS

# Up to this many steps the best sign vector is found among all of them (2^(T−1): s and −s alike).
ENUMERATED_STEPS = 12
# A sign flip must raise sᵀXs by more than this to be taken (so the search ends).
FLIP_GAIN = 1e-12
# Random starts of the rank-D ascent below the relaxation's rank (local maxima exist there), besides X's top
# eigenvectors; the generator is seeded, so the audit is reproducible.
RANDOM_STARTS = 3
SEED = 0
# The dual's barrier: μ shrinks by MU_FACTOR once Newton's decrement is below NEWTON_TOL (or after NEWTON_STEPS),
# down to BARRIER_END of the block's scale (Σ|X|/T), where the duality gap Tμ is below rounding that matters.
MU_FACTOR = 0.03
NEWTON_TOL = 0.25
NEWTON_STEPS = 20
BARRIER_END = 1e-13
# Fractions of the step to the next μ along the central path's tangent tried, largest first.
PREDICTOR_FRACTIONS = (1.0, 0.5, 0.25)
# A block's ascent stops within GAP_RTOL (relative) of its upper end, when no start rose by ASCENT_RTOL of its
# value over CHECK_SWEEPS sweeps, or after MAX_SWEEPS: the upper end is a proof however it stopped.
GAP_RTOL = 1e-10
ASCENT_RTOL = 1e-13
CHECK_SWEEPS = 10
MAX_SWEEPS = 2000
# The ends count as equal within this (relative), so no search runs for a block the cheap bounds settle.
SETTLED_RTOL = 1e-12


@dataclass(frozen=True)
class DirectionInterval:
    """lower ≤ max ⟨X, G⟩ ≤ upper for every block of a stack (p,), and the best sign vector (p, T)."""

    lower: np.ndarray  # reached by real directions in R^D, on the `standard` blocks
    upper: np.ndarray  # a proven bound on the `fine` blocks, float rounding of this module included
    signs: np.ndarray  # ±1 per step: the best sign vector found (a direction a canary can take in any dimension)


def direction_interval(standard: np.ndarray, fine: np.ndarray, dimension: int) -> DirectionInterval:
    """The interval of every block of a stack (p, T, T) of PSD Gram matrices, gradients in R^`dimension`.

    `standard` and `fine` are the same blocks at two rank cut-offs (the lower end is read on the
    first, the upper on the second; pass the same array twice when there is one).
    """
    if dimension < 1:
        raise ValueError(f"gradients need a dimension >= 1, got {dimension}")
    count, steps = standard.shape[:2]
    if count == 0 or steps == 0:
        return DirectionInterval(np.zeros(count), np.zeros(count), np.ones((count, steps)))
    lower, signs = sign_lower(standard)
    upper = basic_upper(fine)
    open_ = _open(lower, upper)
    if dimension == 1 and steps <= ENUMERATED_STEPS and open_.any():
        upper[open_] = np.minimum(upper[open_], _enumerated_upper(fine[open_]))
        open_ = _open(lower, upper)
    if not open_.any():
        return DirectionInterval(lower, upper, signs)
    dual, primal = central_path(fine[open_])
    upper[open_] = np.minimum(upper[open_], dual_upper(fine[open_], dual))
    rank = min(dimension, steps)
    starts = [_unit_factor(primal, rank)]
    if rank < relaxation_rank(steps):  # local maxima exist in this rank: more starts
        starts.append(_unit_factor(standard[open_], rank))
        starts.extend(np.random.default_rng(SEED).normal(size=(RANDOM_STARTS, *starts[0].shape)))
    factors = ascend(standard[open_], np.stack(starts), target=upper[open_])
    lower[open_] = np.maximum(lower[open_], _value(standard[open_], factors).max(axis=0))
    return DirectionInterval(lower, upper, signs)


def relaxation_rank(steps: int) -> int:
    """The smallest r with r(r + 1)/2 > T: the relaxation has an optimum of lower rank (Barvinok–Pataki), so
    from this rank on its value is reached by real directions, and the ascent has no spurious local maxima
    in practice."""
    rank = 1
    while rank * (rank + 1) // 2 <= steps:
        rank += 1
    return rank


def basic_upper(blocks: np.ndarray) -> np.ndarray:
    """min(Σ_ij |X_ij|, T' λ_max(X)) with their rounding, T' the steps that exist: the dual points y_s = Σ_t |X_st|
    (Gershgorin) and y_s = λ_max."""
    active = _active_steps(blocks)
    absolute = np.abs(blocks).sum(axis=(-2, -1)) * (1 + _rounding(blocks))
    largest = np.linalg.eigvalsh(blocks)[..., -1] + _eigen_error(blocks)
    array: np.ndarray = np.minimum(absolute, active * largest * (1 + _rounding(blocks)))
    return array


def sign_lower(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(max sᵀXs over the sign vectors s tried, that s) for a stack of blocks (p, T, T).

    For T ≤ ENUMERATED_STEPS every sign vector: the exact optimum for scalar gradients. Beyond, a
    local search from the aligned s = 1 and from the signs of X's top eigenvector, flipping single
    signs while one raises the value (flipping s_i changes sᵀXs by 4 (X_ii − s_i (Xs)_i)).
    """
    count, steps = blocks.shape[:2]
    if steps <= ENUMERATED_STEPS:
        signs = _all_signs(steps)
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


def central_path(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, G) near the end of the central path of the relaxation's dual, min Σ y s.t. Diag(y) − X ⪰ 0.

    Newton's method on Σ y/μ − log det Z, Z = Diag(y) − X, each step damped by 1/(1 + its
    decrement), which keeps Z ≻ 0 (the barrier is self-concordant); μ is multiplied by MU_FACTOR
    once centred, down to BARRIER_END of the block's scale. On the path G = μ Z⁻¹ is primal
    feasible (diag G = 1) and Σ y − ⟨X, G⟩ = Tμ. A block whose step would leave Z ≻ 0 in floating
    point, or whose Z can no longer be inverted in floating point (near the path's end, with steps
    that do not exist padding the block), keeps its last y: the bound `dual_upper` makes of it holds
    at any y.
    """
    count, steps = blocks.shape[:2]
    scale = np.maximum(np.abs(blocks).sum(axis=(-2, -1)) / steps, np.finfo(float).tiny)
    y = np.abs(blocks).sum(axis=-1) + scale[:, None]  # strictly diagonally dominant: Z ≻ 0
    mu, end = scale.copy(), scale * BARRIER_END
    running = np.ones(count, dtype=bool)
    while running.any():
        for _ in range(NEWTON_STEPS):
            index = np.flatnonzero(running)
            moved, decrement, invertible = _newton_step(blocks[index], y[index], mu[index])
            inside = invertible & _positive_definite(_slack(blocks[index], moved))
            y[index[inside]] = moved[inside]
            running[index[~inside]] = False
            if np.all(decrement[inside] < NEWTON_TOL):
                break
        running &= mu > end
        index = np.flatnonzero(running)
        target = np.maximum(mu[index] * MU_FACTOR, end[index])
        y[index] = _predicted(blocks[index], y[index], mu[index], target)
        mu[index] = target
    return y, mu[:, None, None] * _inverses(_slack(blocks, y))[0]


def _predicted(blocks: np.ndarray, y: np.ndarray, mu: np.ndarray, target: np.ndarray) -> np.ndarray:
    """y moved along the central path's tangent from μ to `target` (where that keeps Z ≻ 0), so that few Newton
    steps centre it there: on the path 1/μ = diag(Z⁻¹), so dy/dμ = (Z⁻¹ ∘ Z⁻¹)⁻¹ 1/μ². A block whose Z cannot be
    inverted stays where it is."""
    inverse, invertible = _inverses(_slack(blocks, y))
    predicted = y.copy()
    moving = np.flatnonzero(invertible)
    inverse = inverse[moving]
    tangent = np.linalg.solve(inverse * inverse, np.ones((len(moving), y.shape[1], 1)))[..., 0] / mu[moving, None] ** 2
    waiting = np.arange(len(moving))
    for fraction in PREDICTOR_FRACTIONS:
        chosen = moving[waiting]
        moved = y[chosen] + fraction * (target - mu)[chosen, None] * tangent[waiting]
        inside = _positive_definite(_slack(blocks[chosen], moved))
        predicted[chosen[inside]] = moved[inside]
        waiting = waiting[~inside]
    return predicted


def _positive_definite(matrices: np.ndarray) -> np.ndarray:
    """Whether each symmetric matrix is positive definite in floating point: a Cholesky factorization of the
    whole stack when it succeeds, else each one's smallest eigenvalue."""
    try:
        np.linalg.cholesky(matrices)
    except np.linalg.LinAlgError:
        return np.linalg.eigvalsh(matrices)[..., 0] > 0
    return np.ones(len(matrices), dtype=bool)


def _newton_step(blocks: np.ndarray, y: np.ndarray,
                 mu: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the damped Newton point, the Newton decrement, whether Z could be inverted) of Σ y/μ − log det Z: gradient
    1/μ − diag(Z⁻¹), Hessian Z⁻¹ ∘ Z⁻¹ (positive definite, Schur's product theorem). A block whose Z cannot be
    inverted keeps its y, with decrement 0."""
    inverse, invertible = _inverses(_slack(blocks, y))
    moved, decrement = y.copy(), np.zeros(len(y))
    stepping = np.flatnonzero(invertible)
    inverse = inverse[stepping]
    gradient = 1.0 / mu[stepping, None] - np.diagonal(inverse, axis1=-2, axis2=-1)
    step = -np.linalg.solve(inverse * inverse, gradient[..., None])[..., 0]
    decrement[stepping] = np.sqrt(np.maximum(-np.sum(gradient * step, axis=-1), 0.0))
    moved[stepping] = y[stepping] + step / (1.0 + decrement[stepping])[:, None]
    return moved, decrement, invertible


def _inverses(matrices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every matrix of a stack inverted, whether each could be in floating point): one that cannot (a pivot
    rounds to 0) gets its pseudo-inverse and False, so that it alone stops rather than the whole stack."""
    try:
        return np.linalg.inv(matrices), np.ones(len(matrices), dtype=bool)
    except np.linalg.LinAlgError:
        pass
    inverse, invertible = np.empty_like(matrices), np.ones(len(matrices), dtype=bool)
    for index, matrix in enumerate(matrices):
        try:
            inverse[index] = np.linalg.inv(matrix)
        except np.linalg.LinAlgError:
            inverse[index], invertible[index] = np.linalg.pinv(matrix, hermitian=True), False
    return inverse, invertible


def _slack(blocks: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Z = Diag(y) − X for every block."""
    array: np.ndarray = y[..., None] * np.eye(blocks.shape[-1]) - blocks
    return array


def dual_upper(blocks: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Σ y_s, every y_s first raised by λ_min(Diag(y) − X)'s shortfall plus its rounding, so that
    Diag(y) − X ⪰ 0 holds for the exact matrices too (weak duality: ⟨X, G⟩ ≤ ⟨Diag(y), G⟩ ≤ Σ y_s for
    any feasible G)."""
    slack = _slack(blocks, y)
    shortfall = np.maximum(-np.linalg.eigvalsh(slack)[..., 0], 0.0) + _eigen_error(slack)
    array: np.ndarray = (np.maximum(y, 0.0) + shortfall[:, None]).sum(axis=-1) * (1 + _rounding(blocks))
    return array


def ascend(blocks: np.ndarray, starts: np.ndarray, *, target: np.ndarray) -> np.ndarray:
    """Unit directions for every step of every block from each start (starts, p, T, r), ascended.

    Block coordinate ascent: δ_s ← (Σ_{t≠s} X_st δ_t)/‖·‖ in turn, each the best δ_s given the
    others (a step whose sum is 0 keeps its δ_s). A block stops once a start is within GAP_RTOL of
    `target` (its upper end), when no start rose by ASCENT_RTOL over CHECK_SWEEPS sweeps, or after
    MAX_SWEEPS.
    """
    first = np.zeros(starts.shape[-1])
    first[0] = 1.0
    factors = _unit_rows(starts, first)
    steps = blocks.shape[-1]
    others = blocks * (1.0 - np.eye(steps))
    value = _value(blocks, factors)
    running = np.flatnonzero(value.max(axis=0) < target * (1 - GAP_RTOL))
    for sweep in range(1, MAX_SWEEPS + 1):
        if running.size == 0:
            break
        moving = factors[:, running]
        for s in range(steps):
            pull = np.einsum("pt,kptr->kpr", others[running, s], moving)
            moving[:, :, s] = _unit_rows(pull, moving[:, :, s])
        factors[:, running] = moving
        if sweep % CHECK_SWEEPS:
            continue
        reached = _value(blocks[running], moving)
        rising = np.any(reached - value[:, running] > ASCENT_RTOL * np.abs(reached), axis=0)
        value[:, running] = reached
        running = running[rising & (reached.max(axis=0) < target[running] * (1 - GAP_RTOL))]
    return factors


def _unit_factor(blocks: np.ndarray, rank: int) -> np.ndarray:
    """The top `rank` eigenvectors of each block scaled by √λ, rows made unit: directions whose Gram is near
    the block's (a start for the ascent)."""
    values, vectors = np.linalg.eigh(blocks)
    top = vectors[..., ::-1][..., :rank] * np.sqrt(np.maximum(values[..., ::-1][..., :rank], 0.0))[:, None, :]
    first = np.zeros(rank)
    first[0] = 1.0
    return _unit_rows(top, first)


def _enumerated_upper(blocks: np.ndarray) -> np.ndarray:
    """max sᵀXs over every sign vector, with its rounding: the exact value for scalar gradients."""
    array: np.ndarray = sign_lower(blocks)[0] + np.abs(blocks).sum(axis=(-2, -1)) * _rounding(blocks)
    return array


def _open(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Blocks whose ends are apart by more than rounding."""
    array: np.ndarray = upper > lower + SETTLED_RTOL * np.abs(upper)
    return array


def _value(blocks: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """Σ_st X_st ⟨δ_s, δ_t⟩ for every start and block."""
    array: np.ndarray = np.sum(factors * (blocks @ factors), axis=(-2, -1))
    return array


def _unit_rows(rows: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Every row divided by its norm; a zero row takes `keep`'s."""
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return np.where(norms > 0, rows / np.where(norms > 0, norms, 1.0), keep)


def _active_steps(blocks: np.ndarray) -> np.ndarray:
    """How many steps of each block exist: rows with X_ss > 0 (a PSD row with X_ss = 0 is zero)."""
    array: np.ndarray = np.count_nonzero(np.diagonal(blocks, axis1=-2, axis2=-1) > 0, axis=-1)
    return array


def _rounding(blocks: np.ndarray) -> float:
    """A relative bound on the float error of a sum over T² entries."""
    steps = blocks.shape[-1]
    number: float = 4.0 * steps * steps * EPS
    return number


def _eigen_error(matrices: np.ndarray) -> np.ndarray:
    """A bound on how far a symmetric eigensolver's eigenvalues are from the matrix's: c·T·eps·‖M‖_F."""
    array: np.ndarray = 4.0 * matrices.shape[-1] * EPS * np.linalg.norm(matrices, axis=(-2, -1))
    return array


def _all_signs(steps: int) -> np.ndarray:
    """Every sign vector with s_0 = +1 (s and −s give the same value): (2^(T−1), T)."""
    return 1.0 - 2.0 * ((np.arange(2 ** (steps - 1))[:, None] >> np.arange(steps)) & 1)
