"""Coefficient rows of every gossip message on the noisy inputs z = x + η.

The value x_w^t that node w sends in round t is linear in z: x_w^t = C^t[w] · z. The rows
follow the nodes' own recursion (`Transcript.realized_row`, first step plain, then
`node.mixing.accelerated_step`), so an accountant sees the map the run really applied.
With ``accelerated=False`` the rows are the plain products W_{0:t} = W_{t-1}…W_0 that
Muffliato's Thm 1 uses even for accelerated runs.

Three arithmetics: float rows for scale (one sparse product per round, O(n²·d), never a dense
n³ product); exact rational rows (python-flint) for small graphs, where a rank decides
whether a node can solve for another's input and rounding must not decide it; and the exact
rows modulo a prime, times a random sketch (O(n·c·d) per round), whose ranks certify the
float ones at any n (`audit.modular`).

Rows of values a node never computed (it stopped early) are unspecified; `check_transcript`
guarantees no message and no mixing step reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import TypeVar

import numpy as np
import scipy.sparse as sp
from flint import fmpq, fmpq_mat

from coordinator_tools.audit.modular import mulmod, residue
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from node.mixing import accelerated_step, metropolis_weight, min_degree_weight
from node.topology import Topology

EXACT_RULES = {"metropolis": metropolis_weight, "min_degree": min_degree_weight}
RowsT = TypeVar("RowsT", np.ndarray, fmpq_mat)


def check_transcript(transcript: Transcript) -> None:
    """Raise ValueError unless every value mixed or received was computed by its sender.

    Node w computed x_w^t for t <= completed_rounds(w); x_w^T is its output, never sent.
    """
    rounds = transcript.rounds
    completed = [transcript.completed_rounds(w) for w in range(transcript.n)]
    for v in range(transcript.n):
        if completed[v] > rounds:
            raise ValueError(f"node {v} completed {completed[v]} rounds of {rounds}")
        for t in range(completed[v]):
            for w in transcript.used[v][t]:
                if w not in transcript.neighbours(v, t) or completed[w] < t:
                    raise ValueError(f"node {v} mixed x_{w}^{t}, which node {w} never sent it")
        for w, t in transcript.received[v]:
            if not 0 <= t < rounds or w not in transcript.neighbours(v, t) or completed[w] < t:
                raise ValueError(f"node {v} logged x_{w}^{t}, which node {w} never sent it")


def float_rounds(transcript: Transcript, *, accelerated: bool) -> Iterator[np.ndarray]:
    """C^0, …, C^{T-1}: dense n×n arrays, row w = coefficients of x_w^t on z.

    Streams one round at a time (the caller keeps what it needs) so n = 2048 fits in memory.
    """
    check_transcript(transcript)
    current = np.eye(transcript.n)
    previous = current
    for t in range(transcript.rounds):
        yield current
        if t + 1 < transcript.rounds:
            mixed = float_matrix(transcript, t) @ current
            following = _next_rows(t, previous, mixed, accelerated, transcript.omega)
            previous = current if accelerated else following  # plain rows need no history: save n² floats
            current = following


def float_history(transcript: Transcript, *, accelerated: bool) -> np.ndarray:
    """All rounds stacked: array [t, w, k] = coefficient of z_k in x_w^t."""
    return np.stack(list(float_rounds(transcript, accelerated=accelerated)))


def rational_history(transcript: Transcript, *, accelerated: bool) -> list[fmpq_mat]:
    """C^0, …, C^{T-1} in exact rational arithmetic.

    Weights are the topology's designed rationals (e.g. Metropolis 1/(1 + max(d_u, d_v)),
    checked against the published floats); ω is the exact value of the float the nodes used.
    """
    check_transcript(transcript)
    omega = fmpq(*Fraction(transcript.omega).as_integer_ratio())
    current = _identity(transcript.n)
    previous = current
    history = [current]
    for t in range(transcript.rounds - 1):
        mixed = _rational_matrix(transcript, t) * current
        previous, current = current, _next_rows(t, previous, mixed, accelerated, omega)
        history.append(current)
    return history


def modular_rounds(transcript: Transcript, *, accelerated: bool, prime: int,
                   sketch: np.ndarray) -> Iterator[np.ndarray]:
    """C^0 R, …, C^{T-1} R modulo `prime` for an integer n × c matrix R: the exact rows, sketched."""
    check_transcript(transcript)
    omega = residue(*Fraction(transcript.omega).as_integer_ratio(), prime)
    current = sketch % prime
    previous = current
    matrices: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray]] = {}  # W_t is usually the same every round
    for t in range(transcript.rounds):
        yield current
        if t + 1 < transcript.rounds:
            key = (t // transcript.rounds_per_step,
                   *(used[t] if t < len(used) else None for used in transcript.used))
            if key not in matrices:
                matrices[key] = _modular_matrix(transcript, t, prime)
            mixed = mulmod(*matrices[key], current, prime)
            previous, current = current, _next_rows(t, previous, mixed, accelerated, omega) % prime


def _exact_edge_weight(topology: Topology, u: int, v: int) -> Fraction:
    """W_uv as the exact rational the topology's weighting defines, matching its float."""
    published = topology.edge_weights[(u, v)]
    rule = EXACT_RULES.get(topology.weighting)
    if rule is None:
        return Fraction(published)
    exact = rule(len(topology.neighbours[u]), len(topology.neighbours[v]))
    if float(exact) != published:
        raise ValueError(f"edge ({u}, {v}) weighs {published!r}, not {topology.weighting} {exact}")
    return exact


def _next_rows(t: int, previous: RowsT, mixed: RowsT, accelerated: bool, omega: float | fmpq) -> RowsT:
    """The node's update applied to rows: plain at t = 0 or without acceleration, else Chebyshev."""
    return mixed if t == 0 or not accelerated else accelerated_step(previous, mixed, omega)


def float_matrix(transcript: Transcript, t: int) -> sp.csr_matrix:
    """W_t as applied in round t; rows of nodes that stopped before round t are empty."""
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for v in range(transcript.n):
        if t < transcript.completed_rounds(v):
            for w, weight in transcript.realized_row(v, t).items():
                rows.append(v)
                cols.append(w)
                vals.append(weight)
    return sp.csr_matrix((vals, (rows, cols)), shape=(transcript.n, transcript.n))


def _exact_row(transcript: Transcript, v: int, t: int) -> dict[int, Fraction]:
    """Row v of W_t exactly: the used peers' exact weights, the rest of the row on the self-loop."""
    peers = [w for w in transcript.realized_row(v, t) if w != v]
    weights = {w: _exact_edge_weight(transcript.topology, v, w) for w in peers}
    weights[v] = 1 - sum(weights.values(), Fraction(0))
    return weights


def _rational_matrix(transcript: Transcript, t: int) -> fmpq_mat:
    """W_t exactly; rows of nodes that stopped before round t are empty."""
    n = transcript.n
    matrix = fmpq_mat(n, n)
    for v in range(n):
        if t < transcript.completed_rounds(v):
            for w, weight in _exact_row(transcript, v, t).items():
                matrix[v, w] = fmpq(weight.numerator, weight.denominator)
    return matrix


def _modular_matrix(transcript: Transcript, t: int, prime: int) -> tuple[np.ndarray, np.ndarray]:
    """W_t mod prime as (columns, weights) of each row's nonzeros, padded with weight 0."""
    rows = [_exact_row(transcript, v, t) if t < transcript.completed_rounds(v) else {} for v in range(transcript.n)]
    width = max(len(row) for row in rows)
    columns = np.zeros((transcript.n, width), dtype=np.int64)
    weights = np.zeros((transcript.n, width), dtype=np.int64)
    for v, row in enumerate(rows):
        for slot, (w, weight) in enumerate(row.items()):
            columns[v, slot] = w
            weights[v, slot] = residue(weight.numerator, weight.denominator, prime)
    return columns, weights


def _identity(n: int) -> fmpq_mat:
    matrix = fmpq_mat(n, n)
    for k in range(n):
        matrix[k, k] = 1
    return matrix
