"""A well-conditioned basis of a synchronous Muffliato view: a block Krylov space of the gossip matrix.

When every round applies the same W (no drop-outs), the value x_w^t is P_t(W)[w] · z with P_t
of degree exactly t (W^t, or the Chebyshev recursion, whose leading coefficient is ω^{t-1}).
So a view holding x_w^t for every w in a sender set S and every t < τ spans exactly

    span{(Wᵀ)^k e_w : w ∈ S, k < τ},

the block Krylov space of Wᵀ from E_S. Its raw rows converge to 11ᵀ/n, so their small
singular values fall below rounding (1e-10 and less at n = 1024) while the space itself is
well conditioned: block Arnoldi with full re-orthogonalisation finds new directions with
residuals around 0.2 on the hypercube, Erdős–Rényi graphs and rings, and exact zeros (a
saturated space: few distinct eigenvalues) at rounding level. Directions below DROP_TOL are
dropped as exact zeros; `exact` confirms each drop with a modular rank.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import scipy.sparse as sp

from coordinator_tools.audit.core import EPS, SpanBasis
from coordinator_tools.audit.protocols.muffliato.coefficients import float_matrix
from coordinator_tools.audit.protocols.muffliato.transcript import Message, Transcript

# A new direction whose residual is at most this (W has norm 1) is taken for an exact zero.
DROP_TOL = 1e-8
# Rounding per Arnoldi step, in units of eps · (row nonzeros + basis size) / residual.
STEP_ERROR = 8.0


def krylov_bases(transcript: Transcript, messages: list[Message]) -> Callable[[tuple[int, ...]], SpanBasis | None]:
    """For rows of `messages`: their Krylov basis when they are S × {0..τ-1} and W is fixed, else None."""

    @cache
    def transposed() -> sp.csr_matrix | None:
        mixing = fixed_mixing(transcript)
        return None if mixing is None else mixing.T.tocsr()

    def basis(rows: tuple[int, ...]) -> SpanBasis | None:
        view = [messages[i] for i in rows]
        operator = transposed() if view else None
        if operator is None:
            return None
        senders = sorted({w for w, _ in view})
        steps = 1 + max(t for _, t in view)
        if len(view) != len(senders) * steps:  # distinct messages: only the full product has this size
            return None
        return krylov_basis(operator, senders, steps)

    return basis


def fixed_mixing(transcript: Transcript) -> sp.csr_matrix | None:
    """The W every round applied, or None when rounds differ (drop-outs, early stops, graphs per step)."""
    if any(transcript.completed_rounds(v) != transcript.rounds for v in range(transcript.n)):
        return None
    first = float_matrix(transcript, 0)
    for t in range(1, transcript.rounds - 1):  # the last round's W is never applied to a sent value
        if (float_matrix(transcript, t) != first).nnz:
            return None
    return first


def krylov_basis(operator: sp.csr_matrix, senders: list[int], steps: int) -> SpanBasis:
    """Orthonormal basis of span{operator^k e_w : w ∈ senders, k < steps}, by block Arnoldi.

    Rows of nodes the operator's sparsity cannot reach from the senders in k steps stay exact
    zeros (the exact basis is zero there), so silent inputs stay exactly silent.
    """
    n = operator.shape[0]
    width = len(senders)
    basis = np.zeros((n, width * steps), order="F")  # column blocks stay contiguous
    basis[senders, np.arange(width)] = 1.0
    reach = np.zeros(n, dtype=bool)
    reach[senders] = True
    pattern = abs(operator).astype(bool).astype(np.float64)
    row_nonzeros = int(np.diff(operator.indptr).max())
    size, block, error = width, slice(0, width), 0.0
    for _ in range(1, steps):
        grown = operator @ basis[:, block]
        for _ in range(2):  # twice is enough (Kahan–Parlett)
            grown -= basis[:, :size] @ (basis[:, :size].T @ grown)
        left, residual, _ = np.linalg.svd(grown, full_matrices=False)
        keep = residual > DROP_TOL
        if not keep.any():
            break  # the space is invariant: every later block adds nothing
        reach |= (pattern @ reach) > 0
        new = left[:, keep]
        new[~reach] = 0.0
        error += STEP_ERROR * EPS * (row_nonzeros + size) / float(residual[keep].min())
        block = slice(size, size + new.shape[1])
        basis[:, block] = new
        size += new.shape[1]
    return SpanBasis(basis=basis[:, :size], error=error + size * EPS, complete=size == width * steps)
