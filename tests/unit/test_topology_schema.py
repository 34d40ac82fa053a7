"""The topology file: round trip, stable digest, and one-line errors naming what is wrong."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.errors import ConfigError
from node.topology import MuffliatoParams, Topology, load_topology, save_topology

PROTOCOL = MuffliatoParams(sigma=0.5, sensitivity=2.0, alpha=4.0, rounds=12, dimension=3)


def make_topology(run_id: str = "schema-test") -> Topology:
    return build_topology(
        generate("erdos_renyi", n=12, seed=7), graph_name="erdos_renyi", run_id=run_id, protocol=PROTOCOL, graph_seed=7
    )


def test_save_then_load_gives_the_same_topology(tmp_path: Path) -> None:
    topology = make_topology()
    path = tmp_path / "topo.json"
    save_topology(topology, path)
    loaded = load_topology(path)
    assert loaded == topology
    assert loaded.digest == topology.digest
    assert loaded.gossip_matrix().toarray().tolist() == topology.gossip_matrix().toarray().tolist()
    assert not list(tmp_path.glob("*.tmp"))


def test_digest_is_the_hash_of_the_canonical_form_and_only_changes_with_the_content() -> None:
    topology = make_topology()
    assert topology.digest == hashlib.sha256(topology.model_dump_json().encode()).hexdigest()
    assert make_topology().digest == topology.digest
    assert make_topology(run_id="another-run").digest != topology.digest


def test_addresses_default_to_consecutive_ports() -> None:
    topology = make_topology()
    assert [node.address for node in topology.nodes] == [f"127.0.0.1:{50100 + i}" for i in range(12)]


def _drop_run_id(raw: dict) -> None:
    del raw["run_id"]


def _bad_address(raw: dict) -> None:
    raw["nodes"][3]["address"] = "localhost"


def _edge_to_missing_node(raw: dict) -> None:
    raw["edges"].append({"u": 0, "v": 40, "weight": 0.01})


def _duplicate_edge(raw: dict) -> None:
    raw["edges"].append(dict(raw["edges"][0]))


def _overweight_node(raw: dict) -> None:
    for edge in raw["edges"]:
        if 0 in (edge["u"], edge["v"]):
            edge["weight"] = 0.9


def _bad_sigma(raw: dict) -> None:
    raw["protocol"]["sigma"] = -1.0


def _unknown_field(raw: dict) -> None:
    raw["coordinator"] = "10.0.0.1"


@pytest.mark.parametrize(
    ("corrupt", "expected"),
    [
        (_drop_run_id, "field 'run_id': Field required"),
        (_bad_address, "field 'nodes.3.address'"),
        (_edge_to_missing_node, "edge (0, 40) names a node that does not exist"),
        (_duplicate_edge, "is listed twice"),
        (_overweight_node, "weights of node 0 sum to"),
        (_bad_sigma, "field 'protocol.sigma'"),
        (_unknown_field, "field 'coordinator': Extra inputs are not permitted"),
    ],
)
def test_a_bad_file_gives_a_one_line_error_naming_the_problem(
    tmp_path: Path, corrupt: Callable[[dict], None], expected: str
) -> None:
    path = tmp_path / "topo.json"
    raw = json.loads(make_topology().model_dump_json())
    corrupt(raw)
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as caught:
        load_topology(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_a_file_that_is_not_json_or_missing_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "topo.json"
    path.write_text('{"run_id": ')
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_topology(path)
    with pytest.raises(ConfigError, match="cannot read file"):
        load_topology(tmp_path / "absent.json")
