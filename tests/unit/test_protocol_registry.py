"""The protocol registry: one entry per protocol in `netdp.protocols`, and everything derived from it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from importlib.metadata import EntryPoint
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coordinator_tools.audit.protocols import registered_auditor
from coordinator_tools.cluster.demo_protocols import demo_protocols
from coordinator_tools.sweep.grid import supported
from coordinator_tools.topology.protocol_options import fields_as_options, registered_options
from node import registration, topology
from node.errors import ConfigError
from node.protocols import registry
from node.protocols.base import ProtocolPlugin, ProtocolSpec
from node.protocols.muffliato import PLUGIN as MUFFLIATO
from node.protocols.muffliato import MuffliatoParams
from node.schema import describe_validation_error

BUILT_IN = ("decor", "decor-gd", "muffliato", "muffliato-async", "muffliato-gd", "personalized-cd", "ring-histogram",
            "ring-sum", "rw-sgd", "secure-neighbourhood", "secure-neighbourhood-gd", "walk-sum", "zero-sum",
            "zero-sum-gd")


class EchoParams(BaseModel):
    """A protocol netdp does not ship, registered only inside these tests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["echo"] = "echo"
    sigma: float = Field(1.0, ge=0.0, description="noise std")
    sensitivity: float = Field(1.0, gt=0.0, description="l2 sensitivity")
    echoes: int = Field(2, ge=1, description="times every value is echoed")
    mode: Literal["loud", "quiet"] = Field("loud", description="how it echoes")
    shout: bool = Field(False, description="whether it shouts")
    canaries: int = 0


ECHO = ProtocolPlugin(ProtocolSpec("echo", EchoParams, start=lambda context, data: None), auditor="nowhere:AUDITOR")


@pytest.fixture
def with_echo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as if a package registering `echo` were installed."""
    plugins = {**registry.plugins(), "echo": ECHO}
    monkeypatch.setattr(registry, "plugins", lambda: plugins)
    topology._protocol_union.cache_clear()
    yield
    topology._protocol_union.cache_clear()


def test_netdps_own_protocols_are_registered_in_its_entry_point_group_like_any_other() -> None:
    assert registry.protocol_names() == BUILT_IN
    for name in BUILT_IN:
        assert registry.protocol_plugin(name).name == name
        assert registered_auditor(name).name == name
        assert registered_options()[name].params is registry.protocol_spec(name).params
    assert set(demo_protocols()) == {"muffliato", "muffliato-async", "muffliato-gd", "rw-sgd", "personalized-cd",
                                     "decor"}
    assert supported() == ("decor", "decor-gd", "muffliato", "muffliato-async", "muffliato-gd", "secure-neighbourhood",
                           "secure-neighbourhood-gd", "zero-sum", "zero-sum-gd")
    assert supported("learning") == ("decor-gd", "muffliato-gd", "secure-neighbourhood-gd", "zero-sum-gd")


def test_the_entry_point_group_is_scanned_once() -> None:
    assert registry.plugins() is registry.plugins()


def test_a_broken_or_clashing_entry_is_a_one_line_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    own = EntryPoint("muffliato", "node.protocols.muffliato:PLUGIN", registry.ENTRY_POINT_GROUP)
    entries = {
        "cannot be loaded": [EntryPoint("ghost", "no_such_module:PLUGIN", registry.ENTRY_POINT_GROUP)],
        "is not a ProtocolPlugin": [EntryPoint("odd", "node.protocols.muffliato:PROTOCOL_NAME",
                                               registry.ENTRY_POINT_GROUP)],
        "registers a protocol called 'muffliato'": [EntryPoint("other", own.value, registry.ENTRY_POINT_GROUP)],
        "is registered twice": [own, own],
    }
    for message, listed in entries.items():
        monkeypatch.setattr(registration, "entry_points", lambda group, listed=listed: listed)
        with pytest.raises(ConfigError, match=message):
            registry.plugins.__wrapped__()


def test_an_unknown_protocol_names_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match="unknown protocol 'echo'; this node runs decor, decor-gd, muffliato, "
                                          "muffliato-async"):
        registry.protocol_spec("echo")


@pytest.mark.usefixtures("with_echo")
def test_the_topology_validates_a_registered_protocols_params_by_name() -> None:
    document = {"run_id": "echo", "graph": "path", "nodes": [{"id": 0, "address": "127.0.0.1:6000"},
                                                              {"id": 1, "address": "127.0.0.1:6001"}],
                "edges": [{"u": 0, "v": 1, "weight": 0.5}], "spectral_gap": 1.0, "gamma": 1.0,
                "protocol": {"name": "echo", "echoes": 3}}
    loaded = topology.Topology.model_validate(document)
    assert isinstance(loaded.protocol, EchoParams) and loaded.protocol.echoes == 3
    assert loaded.model_dump()["protocol"] == {"name": "echo", "sigma": 1.0, "sensitivity": 1.0, "echoes": 3,
                                               "mode": "loud", "shout": False, "canaries": 0}
    with pytest.raises(ValidationError) as caught:
        topology.Topology.model_validate({**document, "protocol": {"name": "echo", "echoes": 0}})
    assert describe_validation_error(caught.value, document).startswith("field 'protocol.echoes'")
    with pytest.raises(ValidationError) as caught:
        topology.Topology.model_validate({**document, "protocol": {"name": "nothing"}})
    assert "unknown name 'nothing'; known: 'decor', 'decor-gd', 'muffliato'" in describe_validation_error(caught.value,
                                                                                                         document)


@pytest.mark.usefixtures("with_echo")
def test_what_netdp_reads_off_any_protocols_params_is_checked_when_it_is_read() -> None:
    document = {"run_id": "echo", "graph": "path", "nodes": [{"id": 0, "address": "127.0.0.1:6000"},
                                                              {"id": 1, "address": "127.0.0.1:6001"}],
                "edges": [{"u": 0, "v": 1, "weight": 0.5}], "spectral_gap": 1.0, "gamma": 1.0,
                "protocol": {"name": "echo"}}
    loaded = topology.Topology.model_validate(document)
    assert loaded.protocol_name == "echo"
    with pytest.raises(TypeError, match="EchoParams lacks a name, dimension or vector_length"):
        _ = loaded.published  # a node needs the vector length of what it receives: echo publishes none
    muffliato = loaded.model_copy(update={"protocol": MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0,
                                                                      dimension=3, canaries=2, rounds=1)})
    assert (muffliato.published.name, muffliato.published.dimension, muffliato.published.vector_length) == (
        "muffliato", 3, 5)


@pytest.mark.usefixtures("with_echo")
def test_a_protocol_runs_only_on_the_graph_shapes_it_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    document = {"run_id": "echo", "graph": "path", "nodes": [{"id": 0, "address": "127.0.0.1:6000"},
                                                              {"id": 1, "address": "127.0.0.1:6001"}],
                "arcs": [{"u": 0, "v": 1, "weight": 1.0}, {"u": 1, "v": 0, "weight": 1.0}], "weighting": "explicit",
                "protocol": {"name": "echo"}}
    with pytest.raises(ValidationError, match="protocol 'echo' runs on undirected graphs; this graph is directed"):
        topology.Topology.model_validate(document)

    def refuse(graph: topology.Topology) -> None:
        raise ValueError("echo wants an echo chamber")

    directed = replace(ECHO.spec, graphs=frozenset({"directed"}), check_graph=refuse)
    monkeypatch.setattr(topology, "protocol_spec", lambda name: directed)
    with pytest.raises(ValidationError, match="echo wants an echo chamber"):
        topology.Topology.model_validate(document)


def test_a_protocol_without_options_gets_one_per_params_field() -> None:
    defined = {option.flag: option for option in registered_options()["muffliato"].options}
    options = {option.flag: option for option in fields_as_options(EchoParams, defined).options}
    assert list(options) == ["--sigma", "--sensitivity", "--echoes", "--mode", "--shout"]  # not name, canaries
    assert options["--sigma"] is defined["--sigma"]  # one flag means one thing for every protocol
    assert (options["--echoes"].field, options["--echoes"].type, options["--echoes"].help) == (
        "echoes", int, "times every value is echoed")
    assert options["--mode"].choices == ("loud", "quiet")
    assert options["--shout"].type("true") is True


def test_a_field_whose_flag_means_something_else_is_refused() -> None:
    class Clash(BaseModel):
        name: Literal["clash"] = "clash"
        rounds: int = 1

    taken = {"--rounds": replace(registered_options()["muffliato"].options[4], field="steps")}
    with pytest.raises(ConfigError, match="--rounds already sets another protocol's steps"):
        fields_as_options(Clash, taken)


def test_the_built_in_plugin_names_its_parts_by_import_path() -> None:
    assert MUFFLIATO.spec.params is MuffliatoParams
    assert MUFFLIATO.auditor == "coordinator_tools.audit.protocols.muffliato:AUDITOR"
