"""build_topology and new_run_id: what a published topology holds and which graphs are refused."""

from __future__ import annotations

import networkx as nx
import pytest

from coordinator_tools.topology.build import build_topology, new_run_id
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato import MuffliatoParams
from node.topology import NetworkParams, Topology, hosted_ids

PROTOCOL = MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=10, dimension=2)


def build(graph: nx.Graph, **options: object) -> Topology:
    return build_topology(graph, graph_name="test", run_id="build-test", protocol=PROTOCOL, **options)


def test_the_topology_records_graph_weights_and_parameters() -> None:
    network = NetworkParams(round_deadline_s=1.5)
    topology = build(generate("star", n=4), graph_seed=9, network=network, host="node.local", base_port=7000)
    assert topology.graph == "test" and topology.graph_seed == 9
    assert [(e.u, e.v, e.weight) for e in topology.edges] == [(0, 1, 0.25), (0, 2, 0.25), (0, 3, 0.25)]
    assert [node.address for node in topology.nodes] == [f"node.local:{7000 + i}" for i in range(4)]
    assert topology.protocol == PROTOCOL and topology.network == network


def test_given_addresses_are_used_in_node_order() -> None:
    addresses = ["10.0.0.3:5000", "10.0.0.1:5000", "10.0.0.2:5000"]
    topology = build(generate("complete", n=3), addresses=addresses)
    assert [node.address for node in topology.nodes] == addresses


def test_ids_that_share_an_address_are_one_process() -> None:
    topology = build(generate("ring", n=6), host="h", base_port=7000, ids_per_process=4)
    assert [node.address for node in topology.nodes] == ["h:7000"] * 4 + ["h:7001"] * 2
    assert hosted_ids(topology) == [(0, 1, 2, 3), (4, 5)]


@pytest.mark.parametrize(
    ("graph", "options", "message"),
    [
        (nx.Graph([(0, 1), (2, 3)]), {}, "not connected: it has 2 components"),
        (nx.Graph([(1, 2), (2, 3)]), {}, "nodes must be 0..n-1"),
        (generate("ring", n=4), {"addresses": ["h:1", "h:2"]}, "2 addresses given for 4 nodes"),
        (generate("ring", n=4), {"ids_per_process": 0}, "ids per process must be at least 1"),
        (generate("ring", n=4), {"base_port": 65533}, "field 'nodes.3.address'"),
    ],
)
def test_impossible_topologies_are_one_line_value_errors(graph: nx.Graph, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        build(graph, **options)
    assert "\n" not in str(caught.value)


def test_run_ids_name_the_graph_fit_the_schema_and_do_not_repeat() -> None:
    first, second = new_run_id("file:my edges.txt"), new_run_id("file:my edges.txt")
    assert first.startswith("file-my-edges.txt-")
    assert first != second
    assert build_topology(generate("ring", n=3), graph_name="x", run_id=first, protocol=PROTOCOL).run_id == first
    assert new_run_id("::").startswith("run-")
