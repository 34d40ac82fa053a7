"""`netdp compose`: a compose project for a topology, one service per node, for compose and swarm.

Writes under --out:

    docker-compose.yml        compose file format 3.8 (JSON syntax, which is valid YAML)
    run/topology.json         the topology with every address rewritten to node-<id>:<port>
    run/node-<id>/            node <id>'s log volume (view.log, private.log, estimate.json)

so that after `docker-compose up` the folder `run/` has the RUNDIR layout `netdp audit` reads.
Each container sees only the published topology, its own data file and its own TLS
directory (both read-only), sits on a private internal network, and is reported healthy
by the standard gRPC health service (`python -m node.healthcheck`).

The same file deploys as a swarm stack (`docker stack deploy`), so one generated project runs
on one host or across machines: the network names no driver (compose makes a bridge, swarm an
overlay), `deploy:` (which compose ignores) keeps finished nodes finished and resolves each
service name to its task's own address (`dnsrr`; the routing mesh is not needed), and
nothing in it is compose-only (no `build:`, `container_name`, `restart` or `depends_on`).
With `--pin`, service node-<id> runs only on a machine labelled `netdp.node-<id>=true`,
where its data and certificates are; `netdp collect` gathers the logs after a stack run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from coordinator_tools.cluster.launch import TOPOLOGY_FILE, node_log_dir
from coordinator_tools.datasets import node_data_file
from node.errors import ConfigError
from node.security import load_tls
from node.topology import NodeSpec, Topology, load_topology, save_topology

DEFAULT_IMAGE = "netdp-node:latest"
COMPOSE_FILE = "docker-compose.yml"
COMPOSE_FORMAT = "3.8"
RUN_DIR = "run"
NETWORK = "netdp"
CONTAINER_TOPOLOGY = PurePosixPath("/netdp/topology.json")
CONTAINER_DATA_DIR = PurePosixPath("/netdp/data")
CONTAINER_LOG_DIR = PurePosixPath("/netdp/logs")
CONTAINER_TLS_DIR = PurePosixPath("/netdp/tls")
# Generous timeouts: a probe starts a Python process, and n nodes start at once on one host.
HEALTHCHECK = {"interval": "2s", "timeout": "15s", "retries": 5, "start_period": "30s"}
# Swarm only: a node that has finished (or failed) stays so, as compose's default `restart: "no"` does.
SWARM_DEPLOY = {"restart_policy": {"condition": "none"}, "endpoint_mode": "dnsrr"}


def service_name(node_id: int) -> str:
    """Compose service and host name of node `node_id`, also its folder in `netdp certs` output."""
    return f"node-{node_id}"


def placement_label(node_id: int) -> str:
    """Swarm node label that, set to `true` on a machine, lets node `node_id`'s service run there (--pin)."""
    return f"netdp.{service_name(node_id)}"


def containerized(topology: Topology) -> Topology:
    """The same topology with node <id> reachable at service_name(id) on its original port."""
    nodes = [
        NodeSpec(id=node.id, address=f"{service_name(node.id)}:{node.address.rpartition(':')[2]}")
        for node in topology.nodes
    ]
    return Topology.model_validate({**topology.model_dump(), "nodes": [n.model_dump() for n in nodes]})


def compose_document(
    topology: Topology, data_files: dict[int, Path], image: str, certs_dir: Path | None, user: str,
    pin: bool = False,
) -> dict[str, Any]:
    """The compose file as a dict; host paths inside the output folder are relative to it.

    `pin` adds swarm placement constraints on placement_label(id).
    """
    security = ["--tls-dir", str(CONTAINER_TLS_DIR)] if certs_dir else ["--insecure"]
    services = {}
    for node in containerized(topology).nodes:
        name = service_name(node.id)
        data_file = data_files[node.id]
        volumes = [
            f"./{RUN_DIR}/{TOPOLOGY_FILE}:{CONTAINER_TOPOLOGY}:ro",
            f"{_volume_source(data_file)}:{CONTAINER_DATA_DIR / data_file.name}:ro",
            f"./{node_log_dir(Path(RUN_DIR), node.id)}:{CONTAINER_LOG_DIR}",
        ]
        if certs_dir:
            volumes.append(f"{_volume_source(certs_dir / name)}:{CONTAINER_TLS_DIR}:ro")
        services[name] = {
            "image": image,
            "hostname": name,
            "user": user,
            "command": [
                "--topology", str(CONTAINER_TOPOLOGY),
                "--id", str(node.id),
                "--data", str(CONTAINER_DATA_DIR / data_file.name),
                "--log-dir", str(CONTAINER_LOG_DIR),
                *security,
            ],
            "volumes": volumes,
            "networks": [NETWORK],
            # docker's init as PID 1 passes SIGTERM on, and the node's default handling applies even
            # before its own handler is installed (PID 1 would ignore it: `docker stop` would wait).
            "init": True,
            "healthcheck": {
                "test": ["CMD", "python", "-m", "node.healthcheck", "--address", node.address, "--id", str(node.id),
                         *security],
                **HEALTHCHECK,
            },
            "deploy": _deploy(node.id, pin),
        }
    return {
        "version": COMPOSE_FORMAT,
        "services": services,
        # Attachable: a one-off container (a health probe, a debugging shell) may join a swarm's overlay too.
        "networks": {NETWORK: {"internal": True, "attachable": True}},
    }


def _deploy(node_id: int, pin: bool) -> dict[str, Any]:
    placement = {"placement": {"constraints": [f"node.labels.{placement_label(node_id)} == true"]}} if pin else {}
    return {**SWARM_DEPLOY, **placement}


def _volume_source(path: Path) -> str:
    """Absolute host path for a short-syntax volume, where ':' would split the entry."""
    source = str(path.resolve())
    if ":" in source:
        raise ConfigError(f"{source}: a compose volume path may not contain ':'; move it")
    return source


def write_compose(
    topology: Topology, data_dir: Path, out: Path, image: str, certs_dir: Path | None, user: str,
    pin: bool = False,
) -> Path:
    """Check every input first, then write the compose file, run/topology.json and empty log folders.

    Returns the compose file's path.
    """
    data_files = {node.id: node_data_file(data_dir, node.id) for node in topology.nodes}
    if certs_dir:
        for node in topology.nodes:
            load_tls(certs_dir / service_name(node.id), expected_id=node.id)
    document = compose_document(topology, data_files, image, certs_dir, user, pin)
    log_dirs = [node_log_dir(out / RUN_DIR, node.id) for node in topology.nodes]
    for log_dir in log_dirs:
        if log_dir.exists() and any(log_dir.iterdir()):
            raise ConfigError(f"{log_dir} holds logs of an earlier run; choose another --out or move them away")
    for log_dir in log_dirs:
        log_dir.mkdir(parents=True, exist_ok=True)
    save_topology(containerized(topology), out / RUN_DIR / TOPOLOGY_FILE)
    compose_file = out / COMPOSE_FILE
    compose_file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return compose_file


def _run(args: argparse.Namespace) -> int:
    if args.certs is None and not args.insecure:
        raise ConfigError("pass --certs DIR (from `netdp certs`) for mutual TLS, or --insecure for a plain-text demo")
    if args.insecure:
        print("netdp compose: WARNING: --insecure: nodes will talk PLAIN TEXT without authentication; "
              "use it for local demos only", file=sys.stderr)
    topology = load_topology(args.topology)
    compose_file = write_compose(topology, args.data, args.out, args.image, args.certs,
                                 f"{os.getuid()}:{os.getgid()}", args.pin)
    print(f"wrote {compose_file} ({topology.n} services) and {args.out / RUN_DIR}/")
    print(f"start:  docker-compose -f {compose_file} up")
    print(f"audit:  netdp audit {args.out / RUN_DIR} --out REPORT_DIR")
    print(f"swarm:  docker stack deploy -c {compose_file} --resolve-image never STACK; "
          "netdp collect STACK --out RUNDIR; netdp audit RUNDIR --out REPORT_DIR")
    if args.pin:
        print("pinned: label each machine for its nodes first, "
              f"e.g. docker node update --label-add {placement_label(0)}=true MACHINE")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compose",
        help="generate a docker-compose cluster / swarm stack (one service per node) for a topology",
        description="Write DIR/docker-compose.yml with one service node-<id> per node of TOPOLOGY "
        "(for `docker-compose up` on one host, or `docker stack deploy` on a swarm), "
        "the topology rewritten to the service names (DIR/run/topology.json) and one log folder per "
        "node (DIR/run/node-<id>/), so that DIR/run can be audited after the run.",
    )
    parser.add_argument("topology", type=Path, metavar="TOPOLOGY", help="published topology file (JSON)")
    parser.add_argument("--data", type=Path, required=True, metavar="DIR",
                        help="folder with one private data file node-<id>.json|.npy|.npz|.csv per node; "
                        "each is mounted read-only into its own node only")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="output folder for docker-compose.yml and run/")
    parser.add_argument("--image", default=DEFAULT_IMAGE,
                        help=f"node image, built by deploy/build-node-image.sh (default {DEFAULT_IMAGE})")
    parser.add_argument("--pin", action="store_true",
                        help="swarm only: run service node-<id> only on machines labelled netdp.node-<id>=true "
                        "(where its data file and certificates are); without it the engine places services anywhere")
    security = parser.add_mutually_exclusive_group()
    security.add_argument("--certs", type=Path, metavar="DIR",
                          help="output of `netdp certs`: node-<id>/ is mounted read-only as that node's TLS folder")
    security.add_argument("--insecure", action="store_true", help="plain text, no authentication (local demos only)")
    parser.set_defaults(handler=_run)
