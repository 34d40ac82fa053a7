"""`netdp collect`: wait for a swarm stack's nodes to finish, then gather their logs into a run folder.

Under `docker stack deploy` every node id's log folder is a bind mount on whichever machine ran
its service's task, at the path the compose file names, so the logs end up spread over the swarm.
The engine knows where each task ran: this asks it (the docker CLI, on a manager) and copies the
topology and each node id's public logs (view.log, estimate.json) into RUNDIR, with a plain copy
for tasks that ran on this machine and `scp` from the machine's swarm address for the others.
Private logs stay where they were written. RUNDIR then has the layout `netdp audit` reads,
whether a service hosted one id or several.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from coordinator_tools.cluster.launch import TOPOLOGY_FILE, node_log_dir
from coordinator_tools.compose import CONTAINER_TOPOLOGY, container_log_dir, services
from node.errors import ConfigError, NetdpError
from node.host import ESTIMATE_FILE
from node.idset import describe_nodes
from node.topology import load_topology
from node.viewlog import VIEW_LOG_NAME

STACK_LABEL = "com.docker.stack.namespace"
PUBLIC_FILES = (VIEW_LOG_NAME, ESTIMATE_FILE)
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
        """Copy `source` on `machine` to `destination`; False if it is not there."""
        if machine == self.here:
            if not Path(source).is_file():
                return False
            shutil.copyfile(source, destination)
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


def collect(stack: str, out: Path, timeout_s: float) -> list[str]:
    """Wait for the stack's run to end, copy its topology and public logs into `out`; return what is missing."""
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty; collect each run into a folder of its own")
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
            problems += _fetch_public_logs(machines, task, container_log_dir(node_ids, node_id), out, node_id)
    return problems


def _fetch_public_logs(machines: _Machines, task: ServiceTask, mount: PurePosixPath, out: Path,
                       node_id: int) -> list[str]:
    """Copy node `node_id`'s public logs, mounted at `mount` in its task, into out/node-<id>/; what is missing."""
    source = task.mounts.get(mount)
    if source is None:
        return [f"node {node_id}: its service mounts no log folder at {mount}; was the stack made by `netdp compose`?"]
    log_dir = node_log_dir(out, node_id)
    log_dir.mkdir()
    return [f"node {node_id}: no {source / name} on swarm node {task.machine}"
            for name in PUBLIC_FILES if not machines.fetch(task.machine, source / name, log_dir / name)]


def _run(args: argparse.Namespace) -> int:
    problems = collect(args.stack, args.out, args.timeout)
    for problem in problems:
        print(f"netdp collect: {problem}", file=sys.stderr)
    print(f"collected stack {args.stack} into {args.out}; audit: netdp audit {args.out} --out REPORT_DIR")
    return 1 if problems else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "collect",
        help="wait for a swarm stack from `netdp compose` to finish and gather its logs into a run folder",
        description="On a swarm manager: wait until every task of STACK (deployed with `docker stack deploy` "
        "from a `netdp compose` file) has finished, then copy the topology and each node id's view.log and "
        "estimate.json from the machine that ran its service (scp, key-based, from the machine's swarm address; "
        "a local copy for this machine) into RUNDIR/node-<id>/. Private logs stay on their machines. "
        "Exits 1 if a task did not complete or a file is missing (what was found is still copied).",
    )
    parser.add_argument("stack", metavar="STACK", help="stack name given to `docker stack deploy`")
    parser.add_argument("--out", type=Path, required=True, metavar="RUNDIR", help="new or empty folder for the run")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"how long to wait for the run to finish (default {DEFAULT_TIMEOUT_S:.0f})")
    parser.set_defaults(handler=_run)
