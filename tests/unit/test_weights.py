"""Gossip weights, spectral gaps against closed forms, and the Chebyshev recursion."""

from __future__ import annotations

import math
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.topology.build import build_topology, gossip_mixing
from coordinator_tools.topology.generators import generate
from node.mixing import accelerated_step, chebyshev_omega, edge_weights, spectral_gap
from node.protocols.muffliato import MuffliatoParams
from node.topology import Topology

PROTOCOL = MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=10, dimension=1)


def published(graph: nx.Graph, weighting: str = "metropolis") -> Topology:
    return build_topology(graph, graph_name="test", run_id="test", protocol=PROTOCOL, weighting=weighting)


GRAPHS = {
    "karate_club": generate("karate_club"),
    "star": generate("star", n=7),
    "grid": generate("grid", rows=3, cols=4),
    "erdos_renyi": generate("erdos_renyi", n=30, seed=4),
    "random_geometric": generate("random_geometric", n=30, seed=4),
}


@pytest.mark.parametrize("weighting", ["metropolis", "min_degree"])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_published_matrix_is_symmetric_nonnegative_and_doubly_stochastic(name: str, weighting: str) -> None:
    graph = GRAPHS[name]
    matrix = published(graph, weighting).gossip_matrix().toarray()
    np.testing.assert_array_equal(matrix, matrix.T)
    assert (matrix >= 0.0).all()
    np.testing.assert_allclose(matrix.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-12)
    off_diagonal = matrix - np.diag(np.diag(matrix))
    np.testing.assert_array_equal(off_diagonal > 0, nx.to_numpy_array(graph, nodelist=range(len(graph))) > 0)


def test_metropolis_and_min_degree_weights_on_a_star_are_exact() -> None:
    star = generate("star", n=5)  # hub degree 4, leaves degree 1
    assert set(edge_weights(star, "metropolis").values()) == {Fraction(1, 5)}
    assert set(edge_weights(star, "min_degree").values()) == {Fraction(1, 4)}


def test_metropolis_rows_leave_a_positive_self_weight_exactly() -> None:
    graph = GRAPHS["karate_club"]
    weights = edge_weights(graph, "metropolis")
    for node in graph:
        row = sum(w for (u, v), w in weights.items() if node in (u, v))
        assert row < 1
    degree = dict(graph.degree())
    for (u, v), w in weights.items():
        assert w == Fraction(1, 1 + max(degree[u], degree[v]))


def test_min_degree_rows_sum_to_at_most_one_and_to_one_at_a_max_degree_node() -> None:
    graph = generate("grid", n=9)
    weights = edge_weights(graph, "min_degree")
    rows = [sum(w for (u, v), w in weights.items() if node in (u, v)) for node in graph]
    assert max(rows) == 1  # the centre (degree 4) gives 1/4 to each of its four neighbours
    assert all(row <= 1 for row in rows)


@pytest.mark.parametrize("n", [3, 5, 8])
def test_complete_graph_metropolis_is_uniform_averaging(n: int) -> None:
    topology = published(generate("complete", n=n))
    np.testing.assert_allclose(topology.gossip_matrix().toarray(), np.full((n, n), 1.0 / n), atol=1e-15)
    assert topology.spectral_gap == pytest.approx(1.0, abs=1e-12)
    assert topology.gamma == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("n", [5, 8, 13, 16])
def test_ring_gap_matches_the_circulant_eigenvalues(n: int) -> None:
    # Metropolis weights on a ring are all 1/3, so W = (I + shift + shift^-1) / 3.
    eigenvalues = [1 / 3 + (2 / 3) * math.cos(2 * math.pi * k / n) for k in range(1, n)]
    topology = published(generate("ring", n=n))
    assert topology.spectral_gap == pytest.approx(1.0 - max(abs(e) for e in eigenvalues), abs=1e-12)
    assert topology.gamma == pytest.approx(1.0 - max(eigenvalues), abs=1e-12)
    assert topology.gamma == pytest.approx((2 / 3) * (1 - math.cos(2 * math.pi / n)), abs=1e-12)


@pytest.mark.parametrize("dimension", [1, 2, 3, 5])
def test_hypercube_gap_is_two_over_d_plus_one(dimension: int) -> None:
    # W = (I + A) / (d + 1) and A has eigenvalues d - 2k, so both ends of the spectrum give 2 / (d + 1).
    topology = published(generate("hypercube", n=2**dimension))
    assert topology.spectral_gap == pytest.approx(2.0 / (dimension + 1), abs=1e-12)
    assert topology.gamma == pytest.approx(2.0 / (dimension + 1), abs=1e-12)


def test_published_gap_is_the_gap_of_the_published_matrix() -> None:
    topology = published(GRAPHS["random_geometric"], "min_degree")
    gap, gamma = spectral_gap(topology.gossip_matrix())
    assert topology.spectral_gap == pytest.approx(gap, abs=1e-12)
    assert topology.gamma == pytest.approx(gamma, abs=1e-12)


@pytest.mark.parametrize("n", [2, 8, 16])
def test_min_degree_weights_on_a_hypercube_are_refused(n: int) -> None:
    # Bipartite and regular: weights 1/d leave no self-weight, so W has eigenvalue -1 and never mixes.
    with pytest.raises(ValueError, match="does not converge"):
        gossip_mixing(generate("hypercube", n=n), "min_degree")


def test_explicit_weights_are_used_as_given() -> None:
    graph = generate("ring", n=4)
    weights = {(0, 1): 0.5, (1, 2): 0.25, (2, 3): 0.5, (0, 3): 0.25}
    mixing = gossip_mixing(graph, explicit_weights=weights)
    assert mixing.weighting == "explicit"
    assert mixing.weights == weights


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({(0, 1): 0.5, (1, 2): 0.5, (2, 3): 0.5}, "edge \\(0, 3\\) does not match"),
        ({(0, 1): 0.5, (1, 2): 0.7, (2, 3): 0.3, (0, 3): 0.5}, "node 1 sum to 1.2"),
        ({(0, 1): 0.0, (1, 2): 0.5, (2, 3): 0.5, (0, 3): 0.5}, "not in \\(0, 1\\]"),
    ],
)
def test_bad_explicit_weights_are_refused(weights: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gossip_mixing(generate("ring", n=4), explicit_weights=weights)


@pytest.mark.parametrize("gap", [1e-6, 0.01, 0.2, 0.5, 0.9, 1.0])
def test_chebyshev_omega_matches_its_closed_form(gap: float) -> None:
    # omega = 2 / (1 + sqrt(1 - r^2)) with r = 1 - gap/2: the same value, rationalized.
    r = 1.0 - gap / 2.0
    omega = chebyshev_omega(gap)
    assert omega == pytest.approx(2.0 / (1.0 + math.sqrt(1.0 - r * r)), rel=1e-12)
    assert 1.0 <= omega < 2.0


@pytest.mark.parametrize("gap", [None, 0.0, 1.5])
def test_chebyshev_omega_needs_a_spectral_gap_in_the_unit_interval(gap: float | None) -> None:
    with pytest.raises(ValueError, match="spectral gap must be in"):
        chebyshev_omega(gap)


def test_chebyshev_omega_decreases_from_two_to_its_value_at_gap_one() -> None:
    gaps = np.linspace(1e-4, 1.0, 50)
    omegas = [chebyshev_omega(g) for g in gaps]
    assert all(a > b for a, b in zip(omegas, omegas[1:]))
    assert chebyshev_omega(1e-12) == pytest.approx(2.0, abs=1e-5)
    assert chebyshev_omega(1.0) == pytest.approx(8.0 - 4.0 * math.sqrt(3.0), rel=1e-12)


@pytest.mark.parametrize("gap", [0.0, -0.1, 1.5])
def test_chebyshev_omega_refuses_gaps_outside_zero_one(gap: float) -> None:
    with pytest.raises(ValueError, match="spectral gap"):
        chebyshev_omega(gap)


def test_accelerated_gossip_preserves_the_mean_and_beats_plain_gossip_on_a_ring() -> None:
    topology = published(generate("ring", n=32))
    matrix = topology.gossip_matrix()
    omega = chebyshev_omega(topology.spectral_gap)
    x0 = np.random.default_rng(0).normal(size=(32, 3))
    mean = x0.mean(axis=0)
    previous, current = x0, matrix @ x0  # the first step is plain
    plain = matrix @ x0
    for _ in range(39):
        previous, current = current, accelerated_step(previous, matrix @ current, omega)
        plain = matrix @ plain
        np.testing.assert_allclose(current.mean(axis=0), mean, atol=1e-12)
    accelerated_error = np.linalg.norm(current - mean)
    plain_error = np.linalg.norm(plain - mean)
    assert accelerated_error < 0.1 * plain_error
    assert accelerated_error < 0.05 * np.linalg.norm(x0 - mean)
