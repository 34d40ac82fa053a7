"""Coefficient rows of the gossip messages: hand values, rational == float == dense, drop-outs."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
from flint import fmpq_mat

from coordinator_tools.audit.modular import modular_rank
from coordinator_tools.audit.protocols.muffliato.coefficients import (
    check_transcript,
    float_history,
    modular_rounds,
    rational_history,
)
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.topology import generators
from tests.accounting.reference import dense_rows, drop, topology_from_graph

GRAPHS = {
    "ring": generators.ring(8),
    "star": generators.star(7),
    "grid": generators.grid(rows=3, cols=3),
    "erdos_renyi": generators.erdos_renyi(12, seed=4),
}


def path_transcript(rounds: int = 4, accelerated: bool = False):
    return planned_transcript(topology_from_graph(nx.path_graph(4), rounds=rounds, accelerated=accelerated))


def as_fractions(matrix: fmpq_mat) -> list[list[Fraction]]:
    return [[Fraction(int(x.p), int(x.q)) for x in row] for row in matrix.tolist()]


def path_w() -> list[list[Fraction]]:
    """Metropolis W of the path 0-1-2-3: edge weights 1/(1 + 2), the rest on the diagonal."""
    third = Fraction(1, 3)
    return [[2 * third, third, 0, 0], [third, third, third, 0], [0, third, third, third], [0, 0, third, 2 * third]]


def matmul(a: list[list[Fraction]], b: list[list[Fraction]]) -> list[list[Fraction]]:
    return [[sum((a[i][k] * b[k][j] for k in range(len(b))), Fraction(0)) for j in range(len(b[0]))]
            for i in range(len(a))]


def test_plain_rows_on_the_path_are_the_powers_of_w():
    rows = rational_history(path_transcript(), accelerated=False)
    w = path_w()
    assert as_fractions(rows[0]) == [[Fraction(int(i == j)) for j in range(4)] for i in range(4)]
    assert as_fractions(rows[1]) == w
    assert as_fractions(rows[2])[2] == [Fraction(k, 9) for k in (1, 2, 3, 3)]
    assert as_fractions(rows[3])[2] == [Fraction(k, 27) for k in (4, 6, 8, 9)]
    cube = [[13, 9, 4, 1], [9, 8, 6, 4], [4, 6, 8, 9], [1, 4, 9, 13]]  # 27 W³
    assert np.allclose(float_history(path_transcript(), accelerated=False)[3] * 27, cube, atol=1e-13)


def test_accelerated_rows_follow_the_chebyshev_recursion_exactly():
    transcript = path_transcript(accelerated=True)
    omega = Fraction(transcript.omega)
    w = path_w()
    identity = [[Fraction(int(i == j)) for j in range(4)] for i in range(4)]
    second = [[(1 - omega) * identity[i][j] + omega * matmul(w, w)[i][j] for j in range(4)] for i in range(4)]
    rows = rational_history(transcript, accelerated=True)
    assert as_fractions(rows[1]) == w  # the first step is plain
    assert as_fractions(rows[2]) == second
    assert all(sum(row) == 1 for row in as_fractions(rows[3]))  # P_t(W) stays stochastic


@pytest.mark.parametrize("accelerated", [False, True])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_rational_and_float_rows_agree(name, accelerated):
    transcript = planned_transcript(topology_from_graph(GRAPHS[name], rounds=7, accelerated=accelerated))
    floats = float_history(transcript, accelerated=accelerated)
    exact = rational_history(transcript, accelerated=accelerated)
    exact_as_float = np.array([[[float(x) for x in row] for row in as_fractions(matrix)] for matrix in exact])
    assert np.max(np.abs(floats - exact_as_float)) < 1e-13


@pytest.mark.parametrize("accelerated", [False, True])
def test_sparse_rows_match_dense_products_with_a_drop_out(accelerated):
    planned = planned_transcript(topology_from_graph(GRAPHS["erdos_renyi"], rounds=6, accelerated=accelerated))
    peer = planned.topology.neighbours[5][0]
    transcript = drop(planned, 5, peer, 2)
    dense = dense_rows(transcript, accelerated=accelerated)
    assert np.allclose(float_history(transcript, accelerated=accelerated), dense, rtol=0, atol=1e-14)


def test_a_dropped_neighbours_weight_goes_to_the_self_loop():
    """Path, plain: node 2 misses x_1^1, so x_2^2 = (1/3 + 1/3) x_2^1 + 1/3 x_3^1 = (0, 2, 3, 4)/9."""
    transcript = drop(path_transcript(rounds=3), 2, 1, 1)
    rows = rational_history(transcript, accelerated=False)
    assert as_fractions(rows[2])[2] == [Fraction(k, 9) for k in (0, 2, 3, 4)]
    assert as_fractions(rows[2])[1] == [Fraction(k, 9) for k in (3, 3, 2, 1)]  # node 1 still got x_2^1
    assert np.allclose(float_history(transcript, accelerated=False)[2][2] * 9, [0, 2, 3, 4], atol=1e-14)


def test_a_value_nobody_computed_cannot_be_mixed_or_received():
    transcript = path_transcript(rounds=3)
    crashed = list(transcript.used)
    crashed[3] = transcript.used[3][:1]  # node 3 computed x_3^1 and stopped: x_3^2 was never sent
    with pytest.raises(ValueError, match="x_3\\^2"):
        check_transcript(replace(transcript, used=tuple(crashed)))


def test_weights_that_contradict_the_declared_rule_are_rejected():
    topology = topology_from_graph(nx.path_graph(4), rounds=2, accelerated=False)
    edges = [edge.model_copy(update={"weight": 0.3}) if edge.u == 0 else edge for edge in topology.edges]
    tampered = topology.model_copy(update={"edges": edges})
    with pytest.raises(ValueError, match="not metropolis"):
        rational_history(planned_transcript(tampered), accelerated=False)



@pytest.mark.parametrize("accelerated", [False, True])
def test_modular_rows_are_the_rational_rows_reduced_and_sketched(accelerated):
    """C^t R mod p equals the rational C^t reduced mod p, times R, with a drop-out in round 1."""
    prime = 2_147_483_647
    planned = planned_transcript(topology_from_graph(generators.erdos_renyi(12, seed=4), rounds=4,
                                                     accelerated=accelerated))
    edge = planned.topology.edges[0]
    transcript = drop(planned, edge.u, edge.v, 1)
    sketch = np.random.default_rng(0).integers(0, prime, size=(12, 5), dtype=np.int64)
    modular = list(modular_rounds(transcript, accelerated=accelerated, prime=prime, sketch=sketch))
    for t, rational in enumerate(rational_history(transcript, accelerated=accelerated)):
        reduced = [[x.p * pow(int(x.q), -1, prime) % prime for x in row] for row in rational.tolist()]
        expected = [[sum(int(a) * int(b) for a, b in zip(row, column)) % prime for column in sketch.T]
                    for row in reduced]
        assert modular[t].tolist() == expected


def test_modular_rank_by_hand():
    prime = 2_147_483_647
    assert modular_rank(np.array([[1, 2, 3], [2, 4, 6]]), prime) == 1
    assert modular_rank(np.array([[1, 2, 3], [2, 4, 7]]), prime) == 2
    assert modular_rank(np.array([[1, 0], [0, prime - 1], [1, prime - 1]]), prime) == 2  # row 3 = row 1 + row 2
    assert modular_rank(np.zeros((0, 4), dtype=np.int64), prime) == 0
