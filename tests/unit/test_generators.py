"""Graph generators: shape, connectivity, degrees, seeded determinism and parameter errors."""

from __future__ import annotations

import math
import random

import networkx as nx
import pytest

from coordinator_tools.topology import generators
from coordinator_tools.topology.generators import GENERATORS, generate

# kind, parameters, expected node count, expected edge count (None: random)
CASES = [
    ("ring", {"n": 7}, 7, 7),
    ("complete", {"n": 6}, 6, 15),
    ("grid", {"n": 16}, 16, 24),
    ("grid", {"rows": 3, "cols": 5}, 15, 22),
    ("torus", {"n": 16}, 16, 32),
    ("torus", {"rows": 3, "cols": 4}, 12, 24),
    ("hypercube", {"n": 16}, 16, 32),
    ("exponential", {"n": 16}, 16, 56),
    ("star", {"n": 6}, 6, 5),
    ("erdos_renyi", {"n": 40, "seed": 3}, 40, None),
    ("random_geometric", {"n": 40, "seed": 3}, 40, None),
    ("stochastic_block_model", {"n": 40, "seed": 3, "blocks": 4, "p_in": 0.6, "p_out": 0.05}, 40, None),
    ("davis_southern_women", {}, 32, 89),
    ("karate_club", {}, 34, 78),
    ("florentine_families", {}, 15, 20),
]


def test_registry_lists_every_kind_with_a_summary() -> None:
    assert {kind for kind, *_ in CASES} == set(GENERATORS)
    assert all(kind.summary for kind in GENERATORS.values())
    assert {name for name, kind in GENERATORS.items() if kind.seeded} == {
        "erdos_renyi",
        "random_geometric",
        "stochastic_block_model",
    }


@pytest.mark.parametrize(("kind", "params", "nodes", "edges"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_every_generator_gives_a_connected_simple_graph_on_0_to_n_minus_1(
    kind: str, params: dict, nodes: int, edges: int | None
) -> None:
    graph = generate(kind, **params)
    assert sorted(graph.nodes) == list(range(nodes))
    assert nx.is_connected(graph)
    assert nx.number_of_selfloops(graph) == 0
    assert all(not data for _, _, data in graph.edges(data=True))
    if edges is not None:
        assert graph.number_of_edges() == edges


@pytest.mark.parametrize(
    ("kind", "params", "degrees"),
    [
        ("ring", {"n": 9}, {2}),
        ("complete", {"n": 5}, {4}),
        ("torus", {"n": 25}, {4}),
        ("hypercube", {"n": 32}, {5}),
        ("exponential", {"n": 16}, {7}),  # +-1, +-2, +-4 and 8 (its own inverse)
        ("exponential", {"n": 10}, {6}),  # +-8 = -+2 (mod 10)
        ("grid", {"n": 9}, {2, 3, 4}),
    ],
)
def test_degrees(kind: str, params: dict, degrees: set[int]) -> None:
    graph = generate(kind, **params)
    assert {d for _, d in graph.degree()} == degrees


def test_grid_is_row_major_and_torus_wraps() -> None:
    grid = generate("grid", rows=3, cols=4)
    assert set(grid[0]) == {1, 4}
    assert set(grid[5]) == {1, 4, 6, 9}
    torus = generate("torus", rows=3, cols=4)
    assert set(torus[0]) == {1, 3, 4, 8}


def test_hypercube_links_ids_differing_in_one_bit() -> None:
    graph = generate("hypercube", n=16)
    assert all(bin(u ^ v).count("1") == 1 for u, v in graph.edges())
    assert nx.diameter(graph) == 4


def test_exponential_links_powers_of_two_hops() -> None:
    graph = generate("exponential", n=16)
    assert set(graph[0]) == {1, 2, 4, 8, 12, 14, 15}
    assert set(graph[5]) == {(5 + s) % 16 for s in (1, 2, 4, 8, -1, -2, -4)}


def test_star_hub_is_node_zero() -> None:
    graph = generate("star", n=6)
    assert graph.degree(0) == 5
    assert all(graph.degree(leaf) == 1 for leaf in range(1, 6))


def test_real_graphs_are_relabelled_in_sorted_order_of_their_names() -> None:
    karate = generate("karate_club")
    assert all(karate.nodes[v]["name"] == v for v in karate)
    assert nx.is_isomorphic(karate, nx.karate_club_graph())
    florentine = generate("florentine_families")
    names = [florentine.nodes[v]["name"] for v in range(15)]
    assert names == sorted(nx.florentine_families_graph().nodes)
    medici = names.index("Medici")
    assert {names[w] for w in florentine[medici]} == set(nx.florentine_families_graph()["Medici"])
    assert nx.is_bipartite(generate("davis_southern_women"))


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("erdos_renyi", {"n": 40}),
        ("random_geometric", {"n": 40, "radius": 0.3}),
        ("stochastic_block_model", {"n": 40, "blocks": 3}),
    ],
)
def test_random_kinds_are_deterministic_under_their_seed(kind: str, params: dict) -> None:
    first = generate(kind, seed=11, **params)
    again = generate(kind, seed=11, **params)
    other = generate(kind, seed=12, **params)
    assert sorted(first.edges) == sorted(again.edges)
    assert sorted(first.edges) != sorted(other.edges)


def test_erdos_renyi_redraws_until_connected() -> None:
    n, c = 30, 0.5
    p = c * math.log(n) / n
    seed = next(s for s in range(100) if not nx.is_connected(nx.gnp_random_graph(n, p, seed=random.Random(s))))
    graph = generate("erdos_renyi", n=n, seed=seed, c=c)
    assert nx.is_connected(graph)
    assert graph.number_of_nodes() == n


def test_random_geometric_edges_join_points_closer_than_the_radius() -> None:
    radius = 0.35
    graph = generate("random_geometric", n=30, seed=2, radius=radius)
    pos = nx.get_node_attributes(graph, "pos")
    assert all(0.0 <= x <= 1.0 and 0.0 <= y <= 1.0 for x, y in pos.values())
    for u in graph:
        for v in graph:
            if u < v:
                assert graph.has_edge(u, v) == (math.dist(pos[u], pos[v]) <= radius)


def test_stochastic_block_model_blocks_have_near_equal_sizes() -> None:
    graph = generate("stochastic_block_model", n=31, seed=1, blocks=3, p_in=0.8, p_out=0.1)
    blocks = nx.get_node_attributes(graph, "block")
    assert sorted(list(blocks.values()).count(b) for b in range(3)) == [10, 10, 11]


def test_a_generator_that_never_connects_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generators, "MAX_DRAWS", 3)
    with pytest.raises(ValueError, match="no connected graph in 3 draws; raise radius"):
        generate("random_geometric", n=20, seed=0, radius=1e-6)


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("hypercube", {"n": 12}, "power of 2"),
        ("grid", {"n": 10}, "not a perfect square"),
        ("grid", {"rows": 3}, "give both rows and cols"),
        ("grid", {"n": 12, "rows": 3, "cols": 5}, "does not match"),
        ("torus", {"rows": 2, "cols": 5}, "at least 3"),
        ("ring", {"n": 2}, "n >= 3"),
        ("complete", {"n": 1}, "n >= 2"),
        ("erdos_renyi", {"n": 4, "seed": 0, "c": 5.0}, "exceeds 1"),
        ("erdos_renyi", {"n": 10, "seed": 0, "c": -1.0}, "c > 0"),
        ("random_geometric", {"n": 10, "seed": 0, "radius": 0.0}, "radius > 0"),
        ("stochastic_block_model", {"n": 10, "seed": 0, "blocks": 11}, "blocks <= n"),
        ("stochastic_block_model", {"n": 10, "seed": 0, "p_in": 1.5}, "p_in <= 1"),
        ("stochastic_block_model", {"n": 10, "seed": 0, "p_out": 0.0}, "never connected"),
        ("ring", {"n": 5, "seed": 1}, "ring does not take seed"),
        ("karate_club", {"n": 5}, "karate_club does not take n"),
        ("erdos_renyi", {"n": 10}, "erdos_renyi needs seed"),
        ("ring", {}, "ring needs n"),
        ("directed_ring", {"n": 5}, "unknown graph kind"),
    ],
)
def test_impossible_parameters_are_value_errors(kind: str, params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate(kind, **params)


def test_none_parameters_mean_not_given() -> None:
    assert generate("ring", n=5, seed=None, radius=None).number_of_nodes() == 5
