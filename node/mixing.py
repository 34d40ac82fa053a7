"""Gossip matrices: weights, spectral gap and Chebyshev acceleration (Muffliato Def. 2, 3).

Shared by topology generation, the nodes and the auditor so that all three use the same
weights and the same recursion.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:  # only named in annotations: a node process runs without networkx and scipy
    import networkx as nx
    import scipy.sparse as sp

ArrayT = TypeVar("ArrayT", "np.ndarray", "sp.spmatrix")


def metropolis_weight(degree_u: int, degree_v: int) -> Fraction:
    """Metropolis-Hastings weight W_uv = 1 / (1 + max(d_u, d_v)), exactly."""
    return Fraction(1, 1 + max(degree_u, degree_v))


def min_degree_weight(degree_u: int, degree_v: int) -> Fraction:
    """The Muffliato paper's weight W_uv = min(1/d_u, 1/d_v), exactly."""
    return Fraction(1, max(degree_u, degree_v))


def edge_weights(graph: nx.Graph, weighting: str) -> dict[tuple[int, int], Fraction]:
    """Exact weights {(u, v): W_uv} for u < v of every edge of `graph`."""
    rule = {"metropolis": metropolis_weight, "min_degree": min_degree_weight}[weighting]
    degree = dict(graph.degree())
    return {
        (min(u, v), max(u, v)): rule(degree[u], degree[v]) for u, v in graph.edges() if u != v
    }


def spectral_gap(matrix: sp.spmatrix | np.ndarray) -> tuple[float, float]:
    """(lambda_W, gamma): lambda_W = 1 - max(|lambda_2|, |lambda_n|), gamma = 1 - lambda_2.

    W is symmetric, so its eigenvalues are real; the largest is 1 with eigenvector 1.
    """
    dense = np.asarray(matrix) if isinstance(matrix, np.ndarray) else matrix.toarray()
    eigenvalues = np.sort(np.linalg.eigvalsh(dense))[::-1]
    second, smallest = eigenvalues[1], eigenvalues[-1]
    lambda_w = 1.0 - max(abs(second), abs(smallest))
    return float(lambda_w), float(1.0 - second)


def chebyshev_omega(gap: float | None) -> float:
    """Scale parameter of the re-scaled Chebyshev recursion (Muffliato Alg. 1); `gap` None: a graph without one."""
    if gap is None or not 0.0 < gap <= 1.0:
        raise ValueError(f"spectral gap must be in (0, 1], got {gap}")
    return 2.0 * (1.0 - math.sqrt(gap * (1.0 - gap / 4.0))) / (1.0 - gap / 2.0) ** 2


def accelerated_step(previous: ArrayT, mixed: ArrayT, omega: float) -> ArrayT:
    """x^{t+1} = (1 - omega) x^{t-1} + omega W x^t, given mixed = W x^t.

    Works on vectors (a node's value) and on matrices (the auditor's coefficient rows)
    alike, so both follow the identical recursion. The first step is plain: x^1 = W x^0.
    """
    return (1 - omega) * previous + omega * mixed
