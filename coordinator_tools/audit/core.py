"""The linear-Gaussian model of a run: what the exact column and the attack read, for any protocol.

A run whose messages are affine in the private data and Gaussian noise is y = A x + B η:
one column of A per node's private input, one column of B per noise draw (std σ·s_k, its
own scale s_k relative to the run's σ), one row per message some observer received. A draw
is held by one node, or shared by the two ends of an edge (a pairwise secret: the column
enters their messages with opposite signs); every holder knows it. For an
observer v (its own input removed and, by default, its own noise), changing x_u by Δ shifts
the mean of v's rows by Δ·A e_u against noise of covariance σ²·B S² Bᵀ, so v's view is
exactly a Gaussian mechanism with

    μ²_{u→v} = (Δ/σ)² · p,   p = (A e_u)ᵀ (B S² Bᵀ)⁺ (A e_u),   p = ∞ if A e_u ∉ range(B S).

p does not depend on σ, so it is computed once and scaled (calibration reuses it).
D-dimensional inputs with independent per-coordinate noise give the same μ: the rows are
the same for every coordinate.

When every node draws its noise once and every message carries x + η (A = B, S = I, the
Muffliato protocols), p is the squared norm of e_u projected on the row space of the view;
`exact` computes that case exactly (rational arithmetic) or as a certified float interval,
and every other model through `gaussian_geometry` here. For that interval a model may offer
a well-conditioned basis of a view's row space (`SpanBasis`: the raw rows converge to 11ᵀ/n
and hide real directions below rounding) and its exact rows modulo a prime (`modular`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from flint import fmpq_mat
from scipy.linalg import solve_triangular

from coordinator_tools.audit.modular import Sketch

EPS = float(np.finfo(float).eps)
# Singular values above FINE_RTOL · σ_max count for the upper end of an interval.
FINE_RTOL = 4 * EPS
# A e_u counts as outside the noise's range when its residual exceeds this fraction of it.
RANGE_RTOL = 1e-9
# The Gram path serves a noise map whose Gram matrix G = M Mᵀ has λ_min(G) > GRAM_MIN_RATIO · ‖G‖_∞: then
# σ_min(M) > 1e-2 σ_max(M), far above both rank cut-offs, and p's rounding is O(κ(G) m eps) with κ(G) < 1e4.
GRAM_MIN_RATIO = 1e-4
# Rows per block of the Gram matrix: blocks of rows that end early (earlier messages) skip the later draws.
GRAM_BLOCK_ROWS = 64


@dataclass(frozen=True)
class SpanBasis:
    """An orthonormal basis (n × f columns, on all n inputs) of a view's row space, computed stably.

    ``error`` bounds the sine of the largest angle between span(basis) and an f-dimensional
    subspace of the exact row space. ``complete`` says f equals the number of rows, so the
    dimension is certified; otherwise directions were dropped as rounding and a modular rank
    must confirm that they were exactly zero.
    """

    basis: np.ndarray
    error: float
    complete: bool


@dataclass(frozen=True)
class LinearGaussianModel:
    """y = A x + B η for every message some observer received, and who received which.

    ``noise`` None means one draw per node, at the run's σ, with the same rows as the inputs
    (B = A): stored once. ``exact_rows`` optionally gives A in rational arithmetic (for that
    case only), so small runs are accounted without rounding. For that case too, ``sketch``
    gives the exact rows times an integer matrix modulo a prime (ranks that certify the float
    ones), and ``span_basis`` a stable basis of the span of some message rows, or None where
    the model has none for them.
    """

    n: int
    inputs: np.ndarray  # (m, n): A
    received: tuple[tuple[int, ...], ...]  # per node v: the rows in v's view
    noise: np.ndarray | None = None  # (m, k): B
    noise_owner: tuple[int, ...] | None = None  # the node that drew each noise column
    noise_holders: tuple[tuple[int, ...], ...] | None = None  # every node that knows each column (None: its owner)
    noise_scale: np.ndarray | None = None  # σ_k / σ of each noise column
    exact_rows: Callable[[], fmpq_mat] | None = field(default=None, compare=False, repr=False)
    sketch: Sketch | None = field(default=None, compare=False, repr=False)
    span_basis: Callable[[tuple[int, ...]], SpanBasis | None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        rows, width = self.inputs.shape
        if width != self.n or len(self.received) != self.n:
            raise ValueError(f"a model of {self.n} nodes needs {self.n} input columns and views")
        if any(not 0 <= i < rows for view in self.received for i in view):
            raise ValueError("a view names a message row the model does not hold")
        if self.noise is not None:
            draws = self.noise.shape[1]
            if self.noise.shape[0] != rows or len(self.owners) != draws or self.scales.shape != (draws,):
                raise ValueError("noise rows, owners and scales must match the noise columns")
            if np.any(self.scales < 0):
                raise ValueError("noise scales must be >= 0")
            if self.noise_holders is not None and (
                    len(self.noise_holders) != draws
                    or any(owner not in holders for owner, holders in zip(self.owners, self.noise_holders))
                    or any(not 0 <= h < self.n for holders in self.noise_holders for h in holders)):
                raise ValueError("noise holders must name, for every noise column, nodes that include its owner")
        elif self.noise_holders is not None:
            raise ValueError("shared draws need explicit noise rows")

    @property
    def owners(self) -> tuple[int, ...]:
        """The node that drew each noise column."""
        if self.noise is None:
            return tuple(range(self.n))
        return self.noise_owner if self.noise_owner is not None else tuple(range(self.noise.shape[1]))

    @property
    def holders(self) -> tuple[tuple[int, ...], ...]:
        """Every node that knows each noise column: its owner, and the other end of a pairwise secret's edge."""
        if self.noise_holders is not None:
            return self.noise_holders
        return tuple((owner,) for owner in self.owners)

    @cached_property
    def holder_matrix(self) -> np.ndarray:
        """(k, n) bool: whether node v knows noise column k (`holders` as a table, read once per view)."""
        table = np.zeros((len(self.holders), self.n), dtype=bool)
        for k, holders in enumerate(self.holders):
            table[k, list(holders)] = True
        return table

    @cached_property
    def noise_ends(self) -> np.ndarray:
        """`row_ends` of B: the draws each message depends on end there (read by every view's Gram)."""
        return row_ends(self.noise_rows)

    @property
    def scales(self) -> np.ndarray:
        """σ_k / σ of each noise column."""
        if self.noise is None or self.noise_scale is None:
            return np.ones(len(self.owners))
        return np.asarray(self.noise_scale, dtype=float)

    @property
    def noise_rows(self) -> np.ndarray:
        """B."""
        return self.inputs if self.noise is None else self.noise

    @property
    def shared(self) -> bool:
        """One draw per node, at the run's σ, with the input's rows: the projection case."""
        if self.noise is None:
            return True
        return (self.owners == tuple(range(self.n)) and self.noise_holders is None and bool(np.all(self.scales == 1.0))
                and np.array_equal(self.noise, self.inputs))


def gaussian_geometry(signal: np.ndarray, noise_map: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p = aᵀ (M Mᵀ)⁺ a for every column a of `signal`, M = `noise_map`: (standard, fine) rank cut-off.

    The lower end keeps singular values above the backward error max(m, k)·eps·σ_max; the
    upper end keeps those above FINE_RTOL·σ_max. A column with a residual outside the kept
    range is infinite (the view pins u's input down without noise); a zero column is 0.
    A view whose Gram matrix is well conditioned needs no SVD of its k columns: `gram_geometry`.
    """
    ends = [np.where(outside, np.inf, np.sum(np.square(whitened), axis=0))
            for whitened, outside in whitened_signal(signal, noise_map)]
    return np.minimum(*ends), np.maximum(*ends)


def gram_geometry(signal: np.ndarray, gram_matrix: np.ndarray, error: float) -> np.ndarray | None:
    """`gaussian_geometry`'s p from G = M Mᵀ (rows normalised as there, computed within `error` in ∞-norm) when G
    is provably well conditioned: both ends are then this one value. None otherwise (the SVD decides the rank).

    Cholesky succeeds on G − τI, τ = GRAM_MIN_RATIO·‖G‖_∞ ≥ GRAM_MIN_RATIO·λ_max, only if λ_min(G) > τ up to
    the Gram's error and the factorization's rounding (m·eps·‖G‖), both required ≪ τ: M then has full row
    rank with σ_min > 1e-2 σ_max, every direction is kept at both cut-offs, no column leaves the range, and
    p = aᵀ G⁻¹ a from the Cholesky factor, to O(κ(G) m eps) with κ(G) < 1e4. The SVD costs O(k m²) on the
    k draws; G costs at most half that in one product (`gram`), then O(m³).
    """
    rows = gram_matrix.shape[0]
    if rows == 0:
        return None
    shift = GRAM_MIN_RATIO * float(np.max(np.sum(np.abs(gram_matrix), axis=1)))
    if error + rows * EPS * shift / GRAM_MIN_RATIO > 1e-2 * shift:
        return None
    try:
        np.linalg.cholesky(gram_matrix - shift * np.eye(rows))
        factor = np.linalg.cholesky(gram_matrix)
    except np.linalg.LinAlgError:
        return None
    whitened = solve_triangular(factor, signal, lower=True, check_finite=False)
    p: np.ndarray = np.sum(np.square(whitened), axis=0)
    return p


def gram(matrix: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """M Mᵀ by blocks of GRAM_BLOCK_ROWS rows, each pair of blocks multiplied up to the shorter one's last
    nonzero column (`ends`: `row_ends` of the rows; a zero tail adds exactly nothing): rows in drawing
    order skip the draws made after them."""
    rows = matrix.shape[0]
    blocks = [slice(start, min(start + GRAM_BLOCK_ROWS, rows)) for start in range(0, rows, GRAM_BLOCK_ROWS)]
    block_ends = [int(np.max(ends[block])) for block in blocks]
    result = np.empty((rows, rows))
    for i, (block, end) in enumerate(zip(blocks, block_ends)):
        for other, other_end in zip(blocks[i:], block_ends[i:]):
            width = min(end, other_end)
            product = matrix[block, :width] @ matrix[other, :width].T
            result[block, other] = product
            result[other, block] = product.T
    return result


def row_ends(matrix: np.ndarray) -> np.ndarray:
    """One past the last nonzero column of each row (0 for a zero row), GRAM_BLOCK_ROWS rows at a time."""
    ends = np.zeros(matrix.shape[0], dtype=int)
    for start in range(0, matrix.shape[0], GRAM_BLOCK_ROWS):
        block = slice(start, start + GRAM_BLOCK_ROWS)
        nonzero = matrix[block, ::-1] != 0
        ends[block] = np.where(nonzero.any(axis=1), matrix.shape[1] - np.argmax(nonzero, axis=1), 0)
    return ends


def whitened_signal(signal: np.ndarray, noise_map: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """At the standard and the fine rank cut-off of `gaussian_geometry`: (the columns of `signal` in noise-whitened
    coordinates, Σ⁻¹Uᵀa over the kept singular directions; whether each column leaves the noise's range).

    Their Gram matrix is aᵀ (M Mᵀ)⁺ b for every two columns; a zero column is zero and never outside.
    """
    columns = signal.shape[1]
    if signal.shape[0] == 0:
        return [(np.zeros((0, columns)), np.zeros(columns, dtype=bool))] * 2
    left, singular, _ = np.linalg.svd(noise_map, full_matrices=False)
    largest = singular[0] if singular.size else 0.0
    norms = np.linalg.norm(signal, axis=0)
    return [_whitened_at(signal, norms, left, singular, cut)
            for cut in (largest * max(noise_map.shape) * EPS, largest * FINE_RTOL)]


def _whitened_at(signal: np.ndarray, norms: np.ndarray, left: np.ndarray, singular: np.ndarray,
                 cut: float) -> tuple[np.ndarray, np.ndarray]:
    """The whitened signal keeping the singular directions above `cut`, and which columns leave their span."""
    keep = singular > cut
    basis = left[:, keep]
    coordinates = basis.T @ signal
    residual = np.linalg.norm(signal - basis @ coordinates, axis=0)
    return coordinates / singular[keep][:, None], (residual > RANGE_RTOL * norms) & (norms > 0)
