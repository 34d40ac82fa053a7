"""Graphs beyond a fixed undirected one: per-step Erdos-Renyi graphs, arcs, and walk transitions."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import numpy as np
import pytest
from pydantic import ValidationError

from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols import registry
from node.protocols.base import GraphShape
from node.protocols.muffliato import MuffliatoParams
from node.schema import describe_validation_error
from node.topology import Topology, erdos_renyi_edges

PROTOCOL = MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=4, dimension=1, accelerated=False)
ER = {"schedule": {"kind": "erdos_renyi", "p": 0.3, "seed": 11}}


@pytest.fixture
def any_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the test protocol run on every graph shape (no protocol of today runs on arcs or drawn graphs)."""
    everywhere = replace(registry.protocol_spec("muffliato"), graphs=frozenset(get_args(GraphShape)))
    monkeypatch.setattr("node.topology.protocol_spec", lambda name: everywhere)


def raw(n: int, **graph: object) -> dict:
    return {
        "run_id": "graph-test",
        "graph": "test",
        "nodes": [{"id": v, "address": f"127.0.0.1:{6000 + v}"} for v in range(n)],
        "protocol": PROTOCOL.model_dump(),
        **graph,
    }


def directed_ring(n: int, **graph: object) -> dict:
    return raw(n, arcs=[{"u": v, "v": (v + 1) % n, "weight": 1.0} for v in range(n)], weighting="explicit", **graph)


def refusal(document: dict) -> str:
    with pytest.raises(ValidationError) as caught:
        Topology.model_validate(document)
    return describe_validation_error(caught.value, document)


def test_every_registered_protocol_says_which_graphs_it_runs_on() -> None:
    for spec in registry.protocol_specs():
        assert spec.graphs and spec.graphs <= set(get_args(GraphShape)), spec.name
        assert spec.params.model_fields["name"].default == spec.name


# --- per-step Erdos-Renyi graphs ---------------------------------------------------------------


@pytest.mark.usefixtures("any_graph")
def test_each_step_graph_is_derived_from_the_public_seed_and_step_alone() -> None:
    first, second = Topology.model_validate(raw(20, **ER)), Topology.model_validate(raw(20, **ER))
    for step in (0, 1, 7):
        assert [first.neighbours_at(v, step) for v in range(20)] == [second.neighbours_at(v, step) for v in range(20)]
    # the derivation is pinned: pairs in row order, kept when the stream SeedSequence([seed, step]) draws < p
    rng = np.random.default_rng(np.random.SeedSequence([11, 3]))
    draws = rng.random(20 * 19 // 2)
    pairs = [(u, v) for u in range(20) for v in range(u + 1, 20)]
    expected = {pair for pair, draw in zip(pairs, draws) if draw < 0.3}
    assert {(u, v) for u in range(20) for v in first.neighbours_at(u, 3) if u < v} == expected
    assert set(erdos_renyi_edges(20, 0.3, 11, 3)) == expected


@pytest.mark.usefixtures("any_graph")
def test_step_graphs_differ_across_steps_and_seeds_and_have_density_p() -> None:
    topology = Topology.model_validate(raw(30, **ER))
    graphs = [set(erdos_renyi_edges(30, 0.3, 11, step)) for step in range(40)]
    assert len({frozenset(graph) for graph in graphs}) == 40
    assert set(erdos_renyi_edges(30, 0.3, 12, 0)) != graphs[0]
    density = np.mean([len(graph) for graph in graphs]) / (30 * 29 / 2)
    assert density == pytest.approx(0.3, abs=0.02)
    for step in (0, 5):
        for v in range(30):
            assert all(v in topology.neighbours_at(w, step) for w in topology.neighbours_at(v, step))
    # a node may talk to anyone at some step, so every other node is a potential neighbour
    assert topology.neighbours[4] == tuple(w for w in range(30) if w != 4)


@pytest.mark.usefixtures("any_graph")
@pytest.mark.parametrize(("weighting", "rule"), [("metropolis", lambda a, b: 1 / (1 + max(a, b))),
                                                  ("min_degree", lambda a, b: 1 / max(a, b))])
def test_step_weights_follow_the_weighting_on_that_step_graph(weighting: str, rule) -> None:
    topology = Topology.model_validate(raw(25, weighting=weighting, **ER))
    for step in (0, 3):
        degree = [len(topology.neighbours_at(v, step)) for v in range(25)]
        matrix = topology.gossip_matrix_at(step).toarray()
        np.testing.assert_allclose(matrix, matrix.T)
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-12)
        for v in range(25):
            row = topology.weight_row_at(v, step)
            assert set(row) == {v, *topology.neighbours_at(v, step)}
            for w in topology.neighbours_at(v, step):
                assert row[w] == pytest.approx(rule(degree[v], degree[w]))
                assert matrix[v, w] == pytest.approx(row[w])
            assert sum(row.values()) == pytest.approx(1.0)


@pytest.mark.usefixtures("any_graph")
def test_a_drawn_graph_has_no_fixed_weights_and_no_negative_steps() -> None:
    topology = Topology.model_validate(raw(6, **ER))
    with pytest.raises(ValueError, match="drawn anew every step"):
        topology.weight_row(0)
    with pytest.raises(ValueError, match="drawn anew every step"):
        topology.gossip_matrix()
    with pytest.raises(ValueError, match="steps count from 0"):
        topology.neighbours_at(0, -1)
    with pytest.raises(ValueError, match="no transition matrix"):
        topology.transition_row(0)


@pytest.mark.usefixtures("any_graph")
@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"edges": [{"u": 0, "v": 1, "weight": 0.5}]}, "cannot list edges"),
        ({"arcs": [{"u": 0, "v": 1, "weight": 0.5}]}, "cannot list arcs"),
        ({"spectral_gap": 0.5, "gamma": 0.5}, "cannot list spectral_gap, gamma"),
        ({"weighting": "explicit"}, "not 'explicit'"),
    ],
)
def test_a_drawn_graph_lists_nothing_a_fixed_graph_has(extra: dict, expected: str) -> None:
    assert expected in refusal(raw(6, **ER, **extra))


def test_the_fixed_schedule_gives_the_fixed_graph_at_every_step() -> None:
    topology = build_topology(generate("karate_club"), graph_name="k", run_id="k", protocol=PROTOCOL)
    assert topology.schedule.kind == "fixed" and topology.graph_shape == "undirected"
    for step in (0, 9, 1000):
        assert topology.neighbours_at(5, step) == topology.neighbours[5]
        assert topology.weight_row_at(5, step) == topology.weight_row(5)
    np.testing.assert_array_equal(topology.gossip_matrix_at(3).toarray(), topology.gossip_matrix().toarray())


def test_todays_protocols_refuse_arcs_and_drawn_graphs() -> None:
    assert "protocol 'muffliato' runs on undirected graphs; this graph is erdos-renyi" in refusal(raw(6, **ER))
    assert "this graph is directed" in refusal(directed_ring(4))


# --- arcs ----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("any_graph")
def test_a_directed_ring_has_one_way_links() -> None:
    topology = Topology.model_validate(directed_ring(5))
    assert topology.graph_shape == "directed"
    assert topology.out_neighbours[0] == (1,) and topology.in_neighbours[0] == (4,)
    assert topology.neighbours[0] == (1, 4)
    assert topology.weight_row(0) == {1: 1.0, 0: 0.0}
    assert topology.transition_row(0) == {1: 1.0}
    matrix = topology.gossip_matrix().toarray()
    np.testing.assert_array_equal(matrix, np.roll(np.eye(5), 1, axis=1))


@pytest.mark.usefixtures("any_graph")
def test_arcs_beside_edges() -> None:
    document = raw(3, edges=[{"u": 0, "v": 1, "weight": 0.5}], arcs=[{"u": 1, "v": 2, "weight": 0.25},
                                                                     {"u": 2, "v": 0, "weight": 1.0}])
    topology = Topology.model_validate(document)
    assert topology.out_neighbours == ((1,), (0, 2), (0,))
    assert topology.in_neighbours == ((1, 2), (0,), (1,))
    assert topology.weight_row(1) == {0: 0.5, 2: 0.25, 1: 0.25}
    assert topology.edge_weights == {(0, 1): 0.5, (1, 0): 0.5, (1, 2): 0.25, (2, 0): 1.0}


@pytest.mark.usefixtures("any_graph")
@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (raw(3, arcs=[{"u": 0, "v": 3, "weight": 0.5}]), "arc 0 -> 3 names a node that does not exist (n = 3)"),
        (raw(3, arcs=[{"u": 0, "v": 1, "weight": 0.5}] * 2), "arc 0 -> 1 is listed twice"),
        (raw(3, edges=[{"u": 0, "v": 1, "weight": 0.5}], arcs=[{"u": 1, "v": 0, "weight": 0.5}]),
         "arc 1 -> 0 is listed twice (as an arc or an edge)"),
        (raw(3, arcs=[{"u": 0, "v": 1, "weight": 0.75}, {"u": 0, "v": 2, "weight": 0.5}]),
         "weights of node 0 sum to 1.250000 > 1"),
        (raw(3, arcs=[{"u": 0, "v": 1, "weight": 1.0}, {"u": 1, "v": 0, "weight": 1.0}]),
         "node 2 has no edge or outgoing arc"),
        (raw(3), "a fixed graph needs at least one edge or arc"),
        (directed_ring(3, spectral_gap=0.5), "spectral_gap is only defined for an undirected graph"),
        (raw(3, edges=[{"u": 0, "v": 1, "weight": 0.5}, {"u": 1, "v": 2, "weight": 0.5}]),
         "spectral_gap is required for an undirected graph"),
    ],
)
def test_bad_arcs_are_one_line_errors(document: dict, expected: str) -> None:
    message = refusal(document)
    assert expected in message and "\n" not in message


# --- walk transitions ----------------------------------------------------------------------------


def test_the_default_walk_is_metropolis_hastings_on_an_undirected_graph() -> None:
    topology = build_topology(generate("star", n=4), graph_name="s", run_id="s", protocol=PROTOCOL,
                              weighting="min_degree")
    # degrees 3 (hub) and 1 (leaves): P_0w = P_w0 = 1/(1 + 3), whatever the gossip weights are
    assert topology.transition_row(0) == {1: 0.25, 2: 0.25, 3: 0.25, 0: 0.25}
    assert topology.transition_row(2) == {0: 0.25, 2: 0.75}
    assert topology.weight_row(2)[0] == pytest.approx(1 / 3)


def test_published_transitions_replace_the_default() -> None:
    topology = build_topology(generate("ring", n=4), graph_name="r", run_id="r", protocol=PROTOCOL)
    ring = [{"u": v, "v": (v + 1) % 4, "probability": 0.5} for v in range(4)]
    back = [{"u": v, "v": (v - 1) % 4, "probability": 0.5} for v in range(4)]
    walk = Topology.model_validate({**topology.model_dump(), "transitions": ring + back})
    assert walk.transition_row(0) == {1: 0.5, 3: 0.5}
    stay = [{"u": v, "v": v, "probability": 0.5} for v in range(4)]
    lazy = Topology.model_validate({**topology.model_dump(), "transitions": ring + stay})
    assert lazy.transition_row(2) == {3: 0.5, 2: 0.5}


@pytest.mark.parametrize(
    ("transitions", "expected"),
    [
        ([{"u": 0, "v": 2, "probability": 1.0}], "transition 0 -> 2 follows no edge or arc"),
        ([{"u": 0, "v": 9, "probability": 1.0}], "transition 0 -> 9 names a node that does not exist"),
        ([{"u": 0, "v": 1, "probability": 0.5}] * 2, "transition 0 -> 1 is listed twice"),
        ([{"u": v, "v": (v + 1) % 4, "probability": 0.9} for v in range(4)],
         "transitions out of node 0 sum to 0.900000, not 1"),
        ([{"u": v, "v": (v + 1) % 4, "probability": 1.0} for v in range(3)],
         "transitions out of node 3 sum to 0.000000, not 1"),
        ([{"u": 0, "v": 1, "probability": 0.0}], "field 'transitions.0.probability'"),
    ],
)
def test_bad_transitions_are_one_line_errors(transitions: list[dict], expected: str) -> None:
    topology = build_topology(generate("ring", n=4), graph_name="r", run_id="r", protocol=PROTOCOL)
    message = refusal({**topology.model_dump(), "transitions": transitions})
    assert expected in message and "\n" not in message


@pytest.mark.usefixtures("any_graph")
def test_chebyshev_acceleration_is_refused_without_a_fixed_graphs_spectral_gap() -> None:
    accelerated = {**raw(10, **ER), "protocol": {**PROTOCOL.model_dump(), "accelerated": True}}
    assert "spectral gap" in refusal(accelerated)
