"""The example files under deploy/ stay valid as the schema evolves."""

from __future__ import annotations

from pathlib import Path

from node.topology import load_topology

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def test_three_host_topology_is_valid_with_one_node_per_host():
    topology = load_topology(EXAMPLES / "topology-3-hosts.json")
    hosts = [node.address.rpartition(":")[0] for node in topology.nodes]
    assert topology.n == 3 and len(set(hosts)) == 3
    assert all(host.endswith(".example") for host in hosts)
