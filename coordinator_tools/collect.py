"""`netdp collect`: gather a run's public logs into a run folder, whole or structure-only.

SOURCE is a run folder on this machine (`netdp run`'s, or the `run/` of a `netdp compose` project,
which the project's folder names too) or a swarm stack. Under `docker stack deploy` every node
id's log folder is a bind mount on whichever machine ran its service's task, at the path the
compose file names, so the logs end up spread over the swarm. The engine knows where each task
ran: this waits for the stack to finish, asks it (the docker CLI, on a manager) and copies each
node id's public logs (view.log, estimate.json) with a plain copy for tasks that ran on this
machine and `scp` from the machine's swarm address for the others. Private logs stay where they
were written. The copied view logs are private files (0600), as the nodes wrote them.

Every view log collected is a coalition of all nodes: whoever holds them all can read every
node's input off two values it logged. `--structure-only` keeps what the privacy accounting
reads and no payload: each view log is stripped on the way (`node.viewlog.write_structure_only`;
a remote one passes through a private scratch folder on this machine first), and neither
estimate.json, nor a private log, nor a node's stderr is copied; the topology and run.json
(which hold no value) are. The result has the layout `netdp audit` reads, whether a service
hosted one id or several.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from coordinator_tools.cluster.launch import RUN_SUMMARY_FILE, TOPOLOGY_FILE, node_log_dir
from coordinator_tools.compose import COMPOSE_FILE, CONTAINER_TOPOLOGY, RUN_DIR, container_log_dir, services
from node.errors import ConfigError, LogFormatError, NetdpError
from node.host import ESTIMATE_FILE
from node.idset import describe_nodes
from node.topology import load_topology
from node.viewlog import LOG_MODE, VIEW_LOG_NAME, write_structure_only

STACK_LABEL = "com.docker.stack.namespace"
PUBLIC_FILES = (VIEW_LOG_NAME, ESTIMATE_FILE)
STRUCTURE_FILES = (VIEW_LOG_NAME,)  # stripped of its payloads on the way
RUN_FILES = (TOPOLOGY_FILE, RUN_SUMMARY_FILE)  # a run folder's own files (no value in them), copied as they are
# Task states after which swarm never runs the task again (restart_policy: none).
FINAL_STATES = frozenset({"complete", "failed", "rejected", "shutdown", "orphaned", "remove"})
POLL_S = 2.0
DEFAULT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class ServiceTask:
    """The newest task of one service: its state, where it ran and where its bind mounts are there."""

    state: str
    problem: str  # swarm's error message, if any
    machine: str  # swarm node id, empty if never scheduled
    mounts: Mapping[PurePosixPath, PurePosixPath]  # container path -> source path on that machine


def _docker(*args: str) -> str:
    try:
        result = subprocess.run(["docker", *args], check=False, capture_output=True, text=True)
    except FileNotFoundError:
        raise ConfigError("the docker CLI is not installed; run `netdp collect` on a swarm manager") from None
    if result.returncode != 0:
        raise NetdpError(f"docker {' '.join(args[:2])} failed: {result.stderr.strip()}")
    return result.stdout


def stack_tasks(stack: str) -> dict[str, ServiceTask]:
    """Each service of the stack, by its compose name (node-<id>, nodes-<lowest>-<highest>), with its newest task."""
    service_ids = _docker("service", "ls", "-q", "--filter", f"label={STACK_LABEL}={stack}").split()
    if not service_ids:
        raise ConfigError(f"no stack {stack!r} on this swarm: run on a manager, after `docker stack deploy`")
    services = json.loads(_docker("service", "inspect", *service_ids))
    task_ids = _docker("service", "ps", "-q", "--no-trunc", *service_ids).split()
    every_task = json.loads(_docker("inspect", "--type", "task", *task_ids)) if task_ids else []
    newest = {task["ServiceID"]: task for task in sorted(every_task, key=lambda task: task["CreatedAt"])}
    tasks = {}
    for service in services:
        mounts = {PurePosixPath(m["Target"]): PurePosixPath(m["Source"])
                  for m in service["Spec"]["TaskTemplate"]["ContainerSpec"].get("Mounts", [])}
        task = newest.get(service["ID"], {"Status": {"State": "not scheduled"}})
        tasks[service["Spec"]["Name"].removeprefix(f"{stack}_")] = ServiceTask(
            state=task["Status"]["State"], problem=task["Status"].get("Err", ""), machine=task.get("NodeID", ""),
            mounts=mounts)
    return tasks


def wait_finished(stack: str, timeout_s: float) -> dict[str, ServiceTask]:
    """Poll until every service's task is in a final state; the run is over then, whatever its outcome."""
    deadline = time.monotonic() + timeout_s
    reported = -1
    while True:
        tasks = stack_tasks(stack)
        finished = sum(task.state in FINAL_STATES for task in tasks.values())
        if finished == len(tasks):
            return tasks
        if finished != reported:
            print(f"netdp collect: {finished}/{len(tasks)} services of stack {stack} finished", file=sys.stderr)
            reported = finished
        if time.monotonic() > deadline:
            running = sorted(f"{name} ({task.state})" for name, task in tasks.items() if task.state not in FINAL_STATES)
            raise NetdpError(f"stack {stack} did not finish within {timeout_s:.0f}s; still going: {', '.join(running)}")
        time.sleep(POLL_S)


class _Machines:
    """Copies files off the swarm's machines: this one directly, the others with scp from their swarm address."""

    def __init__(self) -> None:
        self.here = _docker("info", "--format", "{{.Swarm.NodeID}}").strip()
        self._addresses: dict[str, str] = {}

    def fetch(self, machine: str, source: PurePosixPath, destination: Path) -> bool:
        """Copy `source` on `machine` to the new file `destination`, private as its source; False if it is absent."""
        if machine == self.here:
            if not Path(source).is_file():
                return False
            copy_private(Path(source), destination)
            return True
        address = self._address(machine)
        host = f"[{address}]" if ":" in address else address
        copied = subprocess.run(["scp", "-q", "-o", "BatchMode=yes", f"{host}:{source}", str(destination)],
                                check=False, capture_output=True)
        return copied.returncode == 0

    def _address(self, machine: str) -> str:
        if machine not in self._addresses:
            self._addresses[machine] = _docker("node", "inspect", "--format", "{{.Status.Addr}}", machine).strip()
        return self._addresses[machine]


def copy_private(source: Path, destination: Path) -> None:
    """Copy a file into a new one that only its owner reads (0600 from its creation on)."""
    descriptor = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, LOG_MODE)
    with open(source, "rb") as reader, open(descriptor, "wb") as writer:
        shutil.copyfileobj(reader, writer)


def strip_view_log(source: Path, destination: Path, node_id: int) -> list[str]:
    """Write the structure-only copy of node `node_id`'s view log at `source`; what could not be kept."""
    try:
        contents = write_structure_only(source, destination)
    except LogFormatError as exc:
        return [f"node {node_id}: {exc}; not copied"]
    return [f"node {node_id}: {len(contents.unknown)} records of a kind this netdp does not know cannot be "
            "stripped and were left out"] if contents.unknown else []


def run_folder(source: str) -> Path | None:
    """The run folder SOURCE names (a run folder, or a `netdp compose` project's), or None: SOURCE is a stack."""
    folder = Path(source)
    if (folder / TOPOLOGY_FILE).is_file():
        return folder
    if (folder / COMPOSE_FILE).is_file() and (folder / RUN_DIR / TOPOLOGY_FILE).is_file():
        return folder / RUN_DIR
    return None


def collect_folder(rundir: Path, out: Path, *, structure_only: bool = False) -> list[str]:
    """Copy the run folder's topology, run.json and public logs into `out` (stripped: no payload); what is missing."""
    _require_empty(out)
    topology = load_topology(rundir / TOPOLOGY_FILE)
    out.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (rundir / name).is_file():
            shutil.copyfile(rundir / name, out / name)
    problems = []
    for node_id in range(topology.n):
        source, log_dir = node_log_dir(rundir, node_id), node_log_dir(out, node_id)
        log_dir.mkdir()
        for name in STRUCTURE_FILES if structure_only else PUBLIC_FILES:
            if not (source / name).is_file():
                problems.append(f"node {node_id}: no {source / name}")
            elif structure_only:
                problems += strip_view_log(source / name, log_dir / name, node_id)
            else:
                copy_private(source / name, log_dir / name)
    return problems


def _require_empty(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty; collect each run into a folder of its own")


def collect(stack: str, out: Path, timeout_s: float, *, structure_only: bool = False) -> list[str]:
    """Wait for the stack's run to end, copy its topology and public logs into `out` (stripped: no payload);
    return what is missing."""
    _require_empty(out)
    tasks = wait_finished(stack, timeout_s)
    machines = _Machines()
    out.mkdir(parents=True, exist_ok=True)
    # Every service mounts the same topology file: take it from a machine that ran one to the end.
    source = next((task for task in tasks.values() if task.state == "complete"), None)
    if source is None or not machines.fetch(source.machine, source.mounts[CONTAINER_TOPOLOGY], out / TOPOLOGY_FILE):
        raise NetdpError(f"no node of stack {stack} completed, or its topology file could not be copied: "
                         + ", ".join(f"{name}: {task.state} {task.problem}" for name, task in sorted(tasks.items())))
    problems = []
    for name, node_ids in services(load_topology(out / TOPOLOGY_FILE)).items():
        task = tasks.get(name)
        if task is None:
            problems.append(f"{describe_nodes(node_ids)}: stack {stack} has no service {name}")
            continue
        if task.state != "complete":
            problems.append(f"{describe_nodes(node_ids)}: task {task.state} {task.problem}".rstrip())
        if not task.machine:
            continue
        for node_id in node_ids:
            problems += _fetch_public_logs(machines, task, container_log_dir(node_ids, node_id), out, node_id,
                                           structure_only=structure_only)
    return problems


def _fetch_public_logs(machines: _Machines, task: ServiceTask, mount: PurePosixPath, out: Path, node_id: int, *,
                       structure_only: bool) -> list[str]:
    """Copy node `node_id`'s public logs, mounted at `mount` in its task, into out/node-<id>/; what is missing."""
    source = task.mounts.get(mount)
    if source is None:
        return [f"node {node_id}: its service mounts no log folder at {mount}; was the stack made by `netdp compose`?"]
    log_dir = node_log_dir(out, node_id)
    log_dir.mkdir()
    if not structure_only:
        return [f"node {node_id}: no {source / name} on swarm node {task.machine}"
                for name in PUBLIC_FILES if not machines.fetch(task.machine, source / name, log_dir / name)]
    with tempfile.TemporaryDirectory() as scratch:  # only its owner can read it; gone once the log is stripped
        fetched = Path(scratch) / VIEW_LOG_NAME
        if not machines.fetch(task.machine, source / VIEW_LOG_NAME, fetched):
            return [f"node {node_id}: no {source / VIEW_LOG_NAME} on swarm node {task.machine}"]
        return strip_view_log(fetched, log_dir / VIEW_LOG_NAME, node_id)


def _run(args: argparse.Namespace) -> int:
    rundir = run_folder(args.source)
    if rundir is not None:
        problems = collect_folder(rundir, args.out, structure_only=args.structure_only)
    else:
        problems = collect(args.source, args.out, args.timeout, structure_only=args.structure_only)
    for problem in problems:
        print(f"netdp collect: {problem}", file=sys.stderr)
    what = "the structure of " if args.structure_only else ""
    where = f"run folder {rundir}" if rundir is not None else f"stack {args.source}"
    print(f"collected {what}{where} into {args.out}; audit: netdp audit {args.out} --out REPORT_DIR")
    return 1 if problems else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "collect",
        help="gather a run's public logs (a run folder, or a swarm stack once it finished) into a run folder",
        description="SOURCE is a run folder (written by `netdp run`, or a `netdp compose` project whose run/ "
        "holds the logs) or a swarm stack. For a stack, on a swarm manager: wait until every task of SOURCE "
        "(deployed with `docker stack deploy` from a `netdp compose` file) has finished, then copy from the "
        "machine that ran each service (scp, key-based, from the machine's swarm address; a local copy for this "
        "machine). Into RUNDIR go the topology (and run.json) and each node id's view.log and estimate.json, "
        "in RUNDIR/node-<id>/. Private logs stay where they are. All the view logs of a run tell whoever holds "
        "them every node's input: --structure-only keeps only what the exact and paper columns need. "
        "Exits 1 if a task did not complete or a file is missing (what was found is still copied).",
    )
    parser.add_argument("source", metavar="SOURCE",
                        help="a run folder, a `netdp compose` project, or a stack name given to `docker stack deploy`")
    parser.add_argument("--out", type=Path, required=True, metavar="RUNDIR", help="new or empty folder for the run")
    parser.add_argument("--structure-only", action="store_true",
                        help="copy every view log without its payloads (shapes, ids, peers, rounds, fates, refusals, "
                        "times kept; header marked) and no estimate.json: `netdp audit` computes the exact, paper, "
                        "LDP and central columns from it, not the empirical column, payload checks or utility")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"a stack: how long to wait for the run to finish (default {DEFAULT_TIMEOUT_S:.0f})")
    parser.set_defaults(handler=_run)
