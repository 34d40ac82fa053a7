"""The topology file: round trip, stable digest, and one-line errors naming what is wrong."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.errors import ConfigError
from node.protocols.muffliato import MuffliatoParams
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.schema import describe_validation_error
from node.topology import Topology, load_topology, replace_fields, save_topology

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


def _unknown_protocol(raw: dict) -> None:
    raw["protocol"]["name"] = "gossip-9000"


def _async_without_stopping_rule(raw: dict) -> None:
    raw["protocol"] = {"name": "muffliato-async", "sigma": 1.0, "sensitivity": 1.0, "alpha": 2.0, "dimension": 1}


def _async_bad_tick_rate(raw: dict) -> None:
    _async_without_stopping_rule(raw)
    raw["protocol"].update(exchanges=10, tick_rate=0.0)


def _sync_field_in_async(raw: dict) -> None:
    _async_without_stopping_rule(raw)
    raw["protocol"].update(exchanges=10, rounds=5)


def _bad_schedule_kind(raw: dict) -> None:
    raw["schedule"] = {"kind": "barabasi_albert"}


def _bad_schedule_p(raw: dict) -> None:
    raw["schedule"] = {"kind": "erdos_renyi", "p": 1.5, "seed": 1}


def _arc_self_loop(raw: dict) -> None:
    raw["arcs"] = [{"u": 2, "v": 2, "weight": 0.1}]


@pytest.mark.parametrize(
    ("corrupt", "expected"),
    [
        (_drop_run_id, "field 'run_id': Field required"),
        (_bad_address, "field 'nodes.3.address'"),
        (_edge_to_missing_node, "edge (0, 40) names a node that does not exist"),
        (_duplicate_edge, "is listed twice"),
        (_overweight_node, "weights of node 0 sum to"),
        (_bad_sigma, "field 'protocol.sigma'"),
        (_unknown_field, "unknown field 'coordinator'"),
        (_unknown_protocol,
         "field 'protocol': unknown name 'gossip-9000'; known: 'decor', 'decor-gd', 'muffliato', 'muffliato-async'"),
        (_async_without_stopping_rule, "field 'protocol': give exactly one of 'exchanges'"),
        (_async_bad_tick_rate, "field 'protocol.tick_rate': Input should be greater than 0"),
        (_sync_field_in_async, "unknown field 'protocol.rounds'"),
        (_bad_schedule_kind, "field 'schedule': unknown kind 'barabasi_albert'; known: 'fixed', 'erdos_renyi'"),
        (_bad_schedule_p, "field 'schedule.p'"),
        (_arc_self_loop, "field 'arcs.0': arc 2 -> 2 is a self-loop"),
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


def test_union_tags_are_dropped_but_keys_the_file_really_has_are_kept() -> None:
    raw = json.loads(make_topology().model_dump_json())
    raw["protocol"]["sigma"] = -1.0
    raw["nodes"][0]["address"] = "muffliato"  # a value equal to a tag does not hide a real key
    with pytest.raises(ValidationError) as caught:
        Topology.model_validate(raw)
    locations = [error["loc"] for error in caught.value.errors()]
    assert locations == [("nodes", 0, "address"), ("protocol", "muffliato", "sigma")]
    assert describe_validation_error(caught.value, raw).startswith("field 'nodes.0.address': ")
    assert describe_validation_error(caught.value, raw).endswith("(and 1 more problem)")
    del raw["nodes"][0]["address"]
    with pytest.raises(ValidationError) as caught:
        Topology.model_validate(raw)
    assert describe_validation_error(caught.value, raw).startswith("field 'nodes.0.address': Field required")


def test_an_async_topology_round_trips(tmp_path: Path) -> None:
    protocol = MuffliatoAsyncParams(sigma=0.5, sensitivity=2.0, alpha=4.0, dimension=3, duration_s=3.0)
    topology = replace_fields(make_topology(), protocol=protocol)
    path = tmp_path / "topo.json"
    save_topology(topology, path)
    assert load_topology(path) == topology
    assert load_topology(path).protocol == protocol


@pytest.mark.parametrize(("where", "typo", "message"), [
    ("protocol", "sigma", "unknown field 'protocol.sigmaa' (did you mean 'sigma'?) (and 1 more problem)"),
    ("network", "round_deadline_s", "unknown field 'network.round_deadline_ss' (did you mean 'round_deadline_s'?)"),
    (None, "graph_seed", "unknown field 'graph_seedd' (did you mean 'graph_seed'?)"),
])
def test_a_misspelt_field_is_named_first_with_the_field_it_is_closest_to(where: str | None, typo: str, message: str,
                                                                        tmp_path: Path) -> None:
    path = tmp_path / "topology.json"
    save_topology(make_topology(), path)
    document = json.loads(path.read_text())
    block = document if where is None else document[where]
    block[typo + typo[-1]] = block.pop(typo)
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError) as caught:
        load_topology(path)
    assert str(caught.value) == f"{path}: {message}"
