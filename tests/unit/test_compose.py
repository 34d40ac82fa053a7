"""`netdp compose`: the generated compose file, rewritten topology and log folders.

The compose file is JSON (a subset of YAML), so it is parsed here with `json`; the docker
test additionally has `docker-compose config` validate it. Node and health-check command
lines are parsed with the real `netdp-node` and `node.healthcheck` parsers, so the file
cannot drift from the options those programs accept.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from coordinator_tools import compose
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.compose import containerized, write_compose
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node import cli as node_cli
from node import healthcheck
from node.errors import ConfigError
from node.protocols.muffliato import MuffliatoParams
from node.topology import Topology, hosted_ids, load_topology, save_topology

N = 4
PORTS = [7100 + v for v in range(N)]
USER = "1234:5678"


@pytest.fixture
def topology() -> Topology:
    return build_topology(
        generate("ring", n=N),
        graph_name="ring",
        run_id="compose-test",
        protocol=MuffliatoParams(sigma=0.1, sensitivity=1.0, alpha=2.0, rounds=3, dimension=2),
        addresses=[f"127.0.0.1:{port}" for port in PORTS],
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    write_node_files(synthetic_values(N, 2, 1.0, seed=1), tmp_path / "data")
    return tmp_path / "data"


@pytest.fixture
def certs_dir(tmp_path: Path, topology: Topology) -> Path:
    write_cluster_certs(topology, tmp_path / "certs", days=1)
    return tmp_path / "certs"


def generated(topology: Topology, data_dir: Path, out: Path, certs_dir: Path | None) -> dict:
    compose_file = write_compose(topology, data_dir, out, "netdp-node:test", certs_dir, USER)
    assert compose_file == out / "docker-compose.yml"
    return json.loads(compose_file.read_text())


def volume_map(service: dict) -> dict[str, tuple[str, str]]:
    """container path -> (host path, mode) of a service's short-syntax volumes."""
    entries = [volume.split(":") for volume in service["volumes"]]
    return {entry[1]: (entry[0], entry[2] if len(entry) == 3 else "rw") for entry in entries}


def test_one_service_per_node_with_mtls(topology, data_dir, certs_dir, tmp_path):
    out = tmp_path / "out"
    document = generated(topology, data_dir, out, certs_dir)
    assert document["version"] == "3.8"
    # No driver: docker-compose makes a bridge, `docker stack deploy` an overlay, from the same file.
    assert document["networks"] == {"netdp": {"internal": True, "attachable": True}}
    assert sorted(document["services"]) == [f"node-{v}" for v in range(N)]
    for v in range(N):
        service = document["services"][f"node-{v}"]
        assert (service["image"], service["hostname"], service["user"]) == ("netdp-node:test", f"node-{v}", USER)
        assert service["networks"] == ["netdp"]
        assert service["init"] is True  # SIGTERM reaches the node even outside its own handler
        # Swarm: a finished node is not restarted, and its name resolves to its task (no routing mesh).
        assert service["deploy"] == {"restart_policy": {"condition": "none"}, "endpoint_mode": "dnsrr"}
        assert not {"restart", "build", "container_name", "depends_on"} & service.keys()  # stack deploy: none
        volumes = volume_map(service)
        assert volumes == {
            "/netdp/topology.json": ("./run/topology.json", "ro"),
            f"/netdp/data/node-{v}.json": (str((data_dir / f"node-{v}.json").resolve()), "ro"),
            "/netdp/logs": (f"./run/node-{v}", "rw"),
            "/netdp/tls": (str((certs_dir / f"node-{v}").resolve()), "ro"),
        }
        args = node_cli.build_parser().parse_args(service["command"])
        assert (args.node_id, args.tls_dir, args.insecure) == (v, Path("/netdp/tls"), False)
        assert str(args.data) in volumes and str(args.topology) in volumes and str(args.log_dir) in volumes
        test = service["healthcheck"]["test"]
        assert test[:4] == ["CMD", "python", "-m", "node.healthcheck"]
        check = healthcheck.build_parser().parse_args(test[4:])
        assert (check.address, check.id, check.tls_dir) == (f"node-{v}:{PORTS[v]}", v, args.tls_dir)


def test_only_the_node_own_private_files_are_mounted(topology, data_dir, certs_dir, tmp_path):
    document = generated(topology, data_dir, tmp_path / "out", certs_dir)
    for v in range(N):
        sources = " ".join(document["services"][f"node-{v}"]["volumes"])
        others = [u for u in range(N) if u != v]
        assert all(f"node-{u}.json" not in sources and f"certs/node-{u}" not in sources for u in others)
        assert "ca.key" not in sources


def test_insecure_mode_mounts_no_certificates(topology, data_dir, tmp_path):
    document = generated(topology, data_dir, tmp_path / "out", None)
    service = document["services"]["node-0"]
    assert "/netdp/tls" not in volume_map(service)
    assert node_cli.build_parser().parse_args(service["command"]).insecure
    assert healthcheck.build_parser().parse_args(service["healthcheck"]["test"][4:]).insecure


def test_pin_constrains_each_service_to_machines_labelled_for_its_node(topology, data_dir, certs_dir, tmp_path):
    compose_file = write_compose(topology, data_dir, tmp_path / "out", "netdp-node:test", certs_dir, USER, pin=True)
    services = json.loads(compose_file.read_text())["services"]
    for v in range(N):
        deploy = services[f"node-{v}"]["deploy"]
        assert deploy["placement"] == {"constraints": [f"node.labels.netdp.node-{v} == true"]}
        assert deploy["restart_policy"] == {"condition": "none"}


def test_run_folder_has_the_rundir_layout(topology, data_dir, certs_dir, tmp_path):
    out = tmp_path / "out"
    generated(topology, data_dir, out, certs_dir)
    expected = ["topology.json", *(f"node-{v}" for v in range(N))]
    assert sorted(p.name for p in (out / "run").iterdir()) == sorted(expected)
    assert all(not any((out / "run" / f"node-{v}").iterdir()) for v in range(N))
    rewritten = load_topology(out / "run" / "topology.json")
    assert [node.address for node in rewritten.nodes] == [f"node-{v}:{port}" for v, port in enumerate(PORTS)]
    assert rewritten.model_dump(exclude={"nodes"}) == topology.model_dump(exclude={"nodes"})


def test_containerized_keeps_each_node_port(topology):
    assert [n.address for n in containerized(topology).nodes] == [f"node-{v}:{p}" for v, p in enumerate(PORTS)]


def test_refuses_to_mix_runs(topology, data_dir, certs_dir, tmp_path):
    out = tmp_path / "out"
    generated(topology, data_dir, out, certs_dir)
    (out / "run" / "node-2" / "view.log").write_bytes(b"earlier run")
    with pytest.raises(ConfigError, match="earlier run"):
        generated(topology, data_dir, out, certs_dir)


def test_missing_data_file_is_named(topology, data_dir, certs_dir, tmp_path):
    (data_dir / "node-3.json").unlink()
    with pytest.raises(ConfigError, match="node 3"):
        generated(topology, data_dir, tmp_path / "out", certs_dir)
    assert not (tmp_path / "out").exists()


def test_certificates_of_the_wrong_node_are_refused(topology, data_dir, certs_dir, tmp_path):
    (certs_dir / "node-1").rename(certs_dir / "swap")
    (certs_dir / "node-2").rename(certs_dir / "node-1")
    with pytest.raises(ConfigError, match="not node 1"):
        generated(topology, data_dir, tmp_path / "out", certs_dir)


def command_line(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    compose.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_requires_a_security_choice(topology, data_dir, tmp_path):
    save_topology(topology, tmp_path / "topology.json")
    args = command_line(["compose", str(tmp_path / "topology.json"), "--data", str(data_dir),
                         "--out", str(tmp_path / "o")])
    with pytest.raises(ConfigError, match="--insecure"):
        args.handler(args)


def test_cli_insecure_warns_loudly(topology, data_dir, tmp_path, capsys):
    save_topology(topology, tmp_path / "topology.json")
    args = command_line(["compose", str(tmp_path / "topology.json"), "--data", str(data_dir),
                         "--out", str(tmp_path / "o"), "--insecure"])
    assert args.handler(args) == 0
    assert "PLAIN TEXT" in capsys.readouterr().err
    assert (tmp_path / "o" / "docker-compose.yml").is_file()


IDS_PER_PROCESS = 4
COHOSTED_N = 8


@pytest.fixture
def cohosted(tmp_path: Path) -> tuple[Topology, Path, Path]:
    """An 8-node hypercube published as 2 addresses of 4 ids (`--ids-per-process 4`), its data and certificates."""
    topology = build_topology(
        generate("hypercube", n=COHOSTED_N),
        graph_name="hypercube",
        run_id="compose-cohosted",
        protocol=MuffliatoParams(sigma=0.1, sensitivity=1.0, alpha=2.0, rounds=3, dimension=2),
        host="127.0.0.1",
        base_port=7100,
        ids_per_process=IDS_PER_PROCESS,
    )
    write_node_files(synthetic_values(COHOSTED_N, 2, 1.0, seed=1), tmp_path / "data")
    assert write_cluster_certs(topology, tmp_path / "certs", days=1) == 2
    return topology, tmp_path / "data", tmp_path / "certs"


def test_one_service_per_address_hosts_all_its_ids(cohosted, tmp_path):
    topology, data_dir, certs_dir = cohosted
    compose_file = write_compose(topology, data_dir, tmp_path / "out", "netdp-node:test", certs_dir, USER, pin=True)
    services = json.loads(compose_file.read_text())["services"]
    assert list(services) == ["nodes-0-3", "nodes-4-7"]
    for index, name in enumerate(services):
        ids = tuple(range(index * IDS_PER_PROCESS, (index + 1) * IDS_PER_PROCESS))
        service = services[name]
        assert (service["hostname"], service["user"], service["init"]) == (name, USER, True)
        args = node_cli.build_parser().parse_args(service["command"])
        assert (args.node_id, args.nodes) == (None, ids)
        assert (args.data, args.log_dir, args.tls_dir) == (Path("/netdp/data"), Path("/netdp/logs"), Path("/netdp/tls"))
        # Each id's own data file and log folder, where `netdp-node --nodes` looks for them; the
        # process certificate (node-<lowest id>/ names every id); nothing of another process.
        assert volume_map(service) == {
            "/netdp/topology.json": ("./run/topology.json", "ro"),
            **{f"/netdp/data/node-{v}.json": (str((data_dir / f"node-{v}.json").resolve()), "ro") for v in ids},
            **{f"/netdp/logs/node-{v}": (f"./run/node-{v}", "rw") for v in ids},
            "/netdp/tls": (str((certs_dir / f"node-{ids[0]}").resolve()), "ro"),
        }
        # One probe per process, for its lowest id: the name its peers verify too.
        check = healthcheck.build_parser().parse_args(service["healthcheck"]["test"][4:])
        assert (check.address, check.id, check.tls_dir) == (f"{name}:{7100 + index}", ids[0], args.tls_dir)
        assert service["deploy"]["placement"] == {"constraints": [f"node.labels.netdp.{name} == true"]}
    run = tmp_path / "out" / "run"
    assert sorted(p.name for p in run.iterdir()) == sorted(["topology.json", *(f"node-{v}" for v in range(COHOSTED_N))])
    rewritten = load_topology(run / "topology.json")
    assert [node.address for node in rewritten.nodes] == ["nodes-0-3:7100"] * 4 + ["nodes-4-7:7101"] * 4
    assert hosted_ids(rewritten) == hosted_ids(topology)


def test_a_service_needs_the_certificate_of_all_its_ids(cohosted, tmp_path):
    topology, data_dir, _ = cohosted
    single = build_topology(generate("hypercube", n=COHOSTED_N), graph_name="hypercube", run_id="single",
                            protocol=topology.protocol, host="127.0.0.1", base_port=7100)
    write_cluster_certs(single, tmp_path / "single-certs", days=1)
    with pytest.raises(ConfigError, match="certificate is for node 0, not nodes 1-3"):
        write_compose(topology, data_dir, tmp_path / "out", "netdp-node:test", tmp_path / "single-certs", USER)
