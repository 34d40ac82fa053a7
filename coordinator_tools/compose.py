"""`netdp compose`: a compose project for a topology, one service per node process, for compose and swarm.

One service runs the process of one published address: `node-<id>` hosts the one id published
there (`netdp-node --id`), `nodes-<lowest>-<highest>` every id published at a shared address
(`netdp-node --nodes`, from `netdp topology generate --ids-per-process K`). Writes under --out:

    docker-compose.yml        compose file format 3.8 (JSON syntax, which is valid YAML)
    run/topology.json         the topology with every address rewritten to <service>:<port>
    run/node-<id>/            node <id>'s log volume (view.log, private.log, estimate.json)

so that after `docker-compose up` the folder `run/` has the RUNDIR layout `netdp audit` reads,
however the ids were hosted. Each container sees only the published topology, its own ids' data
files and log folders (one bind mount each) and its process's TLS directory (read-only), sits
on a private internal network, and is reported healthy by the standard gRPC health service
(`python -m node.healthcheck`).

The same file deploys as a swarm stack (`docker stack deploy`), so one generated project runs
on one host or across machines: the network names no driver (compose makes a bridge, swarm an
overlay), `deploy:` (which compose ignores) keeps finished nodes finished and resolves each
service name to its task's own address (`dnsrr`; the routing mesh is not needed), and
nothing in it is compose-only (no `build:`, `container_name`, `restart` or `depends_on`).
With `--pin`, a service runs only on a machine labelled `netdp.<service>=true`, where its
data and certificates are; `netdp collect` gathers the logs after a stack run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from coordinator_tools.cluster.launch import TOPOLOGY_FILE, node_log_dir
from node.data import node_data_file
from node.errors import ConfigError
from node.idset import format_ids
from node.security import load_tls
from node.topology import NodeSpec, Topology, hosted_ids, load_topology, save_topology

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


def node_folder(node_id: int) -> str:
    """`node-<id>`: node <id>'s folder in a run folder and in `netdp certs` output; its service's name if alone."""
    return f"node-{node_id}"


def service_name(node_ids: Sequence[int]) -> str:
    """Compose service and host name of the process hosting `node_ids`, stable and readable from its ids.

    One id keeps the name a single node always had (`node-<id>`); several are named by their
    span (`nodes-<lowest>-<highest>`): always a valid DNS label, whatever the ids, and unique,
    since no two processes share their lowest id.
    """
    low, high = min(node_ids), max(node_ids)
    return node_folder(low) if len(node_ids) == 1 else f"nodes-{low}-{high}"


def services(topology: Topology) -> dict[str, tuple[int, ...]]:
    """The ids each service hosts, by service name, in order of their lowest id: one per published address."""
    return {service_name(node_ids): node_ids for node_ids in hosted_ids(topology)}


def placement_label(node_ids: Sequence[int]) -> str:
    """Swarm node label that, set to `true` on a machine, lets the service of `node_ids` run there (--pin)."""
    return f"netdp.{service_name(node_ids)}"


def container_log_dir(node_ids: Sequence[int], node_id: int) -> PurePosixPath:
    """Where node `node_id`'s log folder is mounted in the container of the process hosting `node_ids`.

    Each id's folder is a mount of its own, so a container never sees another process's logs;
    `netdp-node --nodes` writes node-<id>/ under its --log-dir, `--id` straight into it.
    """
    return CONTAINER_LOG_DIR if len(node_ids) == 1 else CONTAINER_LOG_DIR / node_folder(node_id)


def containerized(topology: Topology) -> Topology:
    """The same topology with every id reachable at its process's service name, on its original port."""
    host = {node_id: name for name, node_ids in services(topology).items() for node_id in node_ids}
    nodes = [
        NodeSpec(id=node.id, address=f"{host[node.id]}:{node.address.rpartition(':')[2]}")
        for node in topology.nodes
    ]
    return Topology.model_validate({**topology.model_dump(), "nodes": [n.model_dump() for n in nodes]})


def compose_document(
    topology: Topology, data_files: dict[int, Path], image: str, certs_dir: Path | None, user: str,
    pin: bool = False,
) -> dict[str, Any]:
    """The compose file as a dict; host paths inside the output folder are relative to it.

    `pin` adds swarm placement constraints on placement_label(ids).
    """
    security = ["--tls-dir", str(CONTAINER_TLS_DIR)] if certs_dir else ["--insecure"]
    published = containerized(topology)
    entries = {}
    for name, node_ids in services(published).items():
        volumes = [f"./{RUN_DIR}/{TOPOLOGY_FILE}:{CONTAINER_TOPOLOGY}:ro"]
        for node_id in node_ids:
            volumes += [
                f"{_volume_source(data_files[node_id])}:{CONTAINER_DATA_DIR / data_files[node_id].name}:ro",
                f"./{node_log_dir(Path(RUN_DIR), node_id)}:{container_log_dir(node_ids, node_id)}",
            ]
        if certs_dir:
            volumes.append(f"{_volume_source(certs_dir / node_folder(node_ids[0]))}:{CONTAINER_TLS_DIR}:ro")
        entries[name] = {
            "image": image,
            "hostname": name,
            "user": user,
            "command": [
                "--topology", str(CONTAINER_TOPOLOGY),
                *_hosting_options(node_ids, data_files),
                "--log-dir", str(CONTAINER_LOG_DIR),
                *security,
            ],
            "volumes": volumes,
            "networks": [NETWORK],
            # docker's init as PID 1 passes SIGTERM on, and the node's default handling applies even
            # before its own handler is installed (PID 1 would ignore it: `docker stop` would wait).
            "init": True,
            # One probe per process: its health service is the process's, SERVING once every hosted id
            # is set up, and the process starts only with a certificate naming all its ids. The probe
            # checks the lowest id, the name its peers verify too (node/runtime.py).
            "healthcheck": {
                "test": ["CMD", "python", "-m", "node.healthcheck", "--address",
                         published.address_of(node_ids[0]), "--id", str(node_ids[0]), *security],
                **HEALTHCHECK,
            },
            "deploy": _deploy(node_ids, pin),
        }
    return {
        "version": COMPOSE_FORMAT,
        "services": entries,
        # Attachable: a one-off container (a health probe, a debugging shell) may join a swarm's overlay too.
        "networks": {NETWORK: {"internal": True, "attachable": True}},
    }


def _hosting_options(node_ids: tuple[int, ...], data_files: dict[int, Path]) -> list[str]:
    """`--id` and the id's own data file, or `--nodes` and the data folder holding each hosted id's file."""
    if len(node_ids) == 1:
        (node_id,) = node_ids
        return ["--id", str(node_id), "--data", str(CONTAINER_DATA_DIR / data_files[node_id].name)]
    return ["--nodes", format_ids(node_ids), "--data", str(CONTAINER_DATA_DIR)]


def _deploy(node_ids: Sequence[int], pin: bool) -> dict[str, Any]:
    placement = {"placement": {"constraints": [f"node.labels.{placement_label(node_ids)} == true"]}} if pin else {}
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
        for node_ids in hosted_ids(topology):
            load_tls(certs_dir / node_folder(node_ids[0]), expected_id=node_ids)
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
    processes = hosted_ids(topology)
    print(f"wrote {compose_file} ({len(processes)} services for {topology.n} node ids) and {args.out / RUN_DIR}/")
    print(f"start:  docker-compose -f {compose_file} up")
    print(f"audit:  netdp audit {args.out / RUN_DIR} --out REPORT_DIR")
    print(f"swarm:  docker stack deploy -c {compose_file} --resolve-image never STACK; "
          "netdp collect STACK --out RUNDIR; netdp audit RUNDIR --out REPORT_DIR")
    if args.pin:
        print("pinned: label each machine for its services first, "
              f"e.g. docker node update --label-add {placement_label(processes[0])}=true MACHINE")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compose",
        help="generate a docker-compose cluster / swarm stack (one service per node process) for a topology",
        description="Write DIR/docker-compose.yml with one service per address of TOPOLOGY: node-<id> for an "
        "address publishing one id, nodes-<lowest>-<highest> (running `netdp-node --nodes`) for one publishing "
        "several (for `docker-compose up` on one host, or `docker stack deploy` on a swarm), "
        "the topology rewritten to the service names (DIR/run/topology.json) and one log folder per "
        "node id (DIR/run/node-<id>/), so that DIR/run can be audited after the run.",
    )
    parser.add_argument("topology", type=Path, metavar="TOPOLOGY", help="published topology file (JSON)")
    parser.add_argument("--data", type=Path, required=True, metavar="DIR",
                        help="folder with one private data file node-<id>.json|.npy|.npz|.csv per node; "
                        "each is mounted read-only into the service hosting its node only")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="output folder for docker-compose.yml and run/")
    parser.add_argument("--image", default=DEFAULT_IMAGE,
                        help=f"node image, built by deploy/build-node-image.sh (default {DEFAULT_IMAGE})")
    parser.add_argument("--pin", action="store_true",
                        help="swarm only: run each service (node-<id>, nodes-<lowest>-<highest>) only on machines "
                        "labelled netdp.<service>=true (where its data files and certificates are); without it the "
                        "engine places services anywhere")
    security = parser.add_mutually_exclusive_group()
    security.add_argument("--certs", type=Path, metavar="DIR",
                          help="output of `netdp certs`: node-<lowest id>/ is mounted read-only as the TLS folder "
                          "of the service hosting that id (its certificate names every id of the service)")
    security.add_argument("--insecure", action="store_true", help="plain text, no authentication (local demos only)")
    parser.set_defaults(handler=_run)
