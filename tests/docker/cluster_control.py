"""Make a docker-compose cluster with the `netdp` CLI, drive it from the host, break it on purpose.

One function, `make_compose_cluster`, writes every cluster the docker tests run (the baseline
and each fault scenario), with the same commands deploy/README.md gives users. `ComposeRun`
starts and stops one compose project and does to its containers what real deployments
suffer: a SIGKILL, a network cut and reconnection, a restart, one slow link. It watches the
nodes only through what they write to their host-mounted logs and what docker reports, as an
operator would; every failure message carries the containers' recent output.

The slow link is a fixed delay on the packets between two nodes, in both directions. The
kernels we run on have no netem qdisc, so `tc` cannot delay packets; instead an iptables
NFQUEUE rule inside each end's network namespace hands the packets for the other end to
link_delay.py, which releases them after the delay (see that file).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest

from coordinator_tools.cli import main as netdp
from coordinator_tools.cluster.launch import node_log_dir
from coordinator_tools.compose import COMPOSE_FILE, NETWORK, RUN_DIR, services
from node.codec import from_tensor
from node.data import load_vector, node_data_file
from node.errors import LogFormatError
from node.host import ESTIMATE_FILE
from node.topology import NetworkParams, Topology, load_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, LogContents, read_log

NODES = 8
DIMENSION = 4
DATA_SEED = 11
POLL_S = 0.02
STATE_CHECK_S = 1.0
LOG_TAIL_LINES = 20
LINK_DELAY_SCRIPT = Path(__file__).with_name("link_delay.py")
HELPER_READY_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ComposeCluster:
    """What `netdp compose` wrote, and the true inputs to check the run against."""

    root: Path
    topology: Topology
    values: np.ndarray

    @property
    def compose_file(self) -> Path:
        return self.root / "cluster" / COMPOSE_FILE

    @property
    def rundir(self) -> Path:
        return self.root / "cluster" / RUN_DIR

    def log_dir(self, node: int) -> Path:
        return node_log_dir(self.rundir, node)

    @property
    def services(self) -> dict[str, tuple[int, ...]]:
        """The node ids of each compose service, by service name."""
        return services(self.topology)

    def service(self, node: int) -> str:
        """The compose service hosting node `node`."""
        return next(name for name, node_ids in self.services.items() if node in node_ids)


def make_compose_cluster(root: Path, image: str, *, run_id: str, sigma: float, protocol: Sequence[str],
                         round_deadline_s: float = NetworkParams().round_deadline_s,
                         ids_per_process: int = 1, compose_options: Sequence[str] = ()) -> ComposeCluster:
    """An 8-node hypercube with data, mTLS certificates and a compose file, made with the `netdp` CLI.

    `protocol` is the `--protocol NAME` and its options, `compose_options` more `netdp compose`
    options, as a user types them; `ids_per_process` ids share each published address, and so
    one compose service.
    """
    topology_file = root / "topology.json"
    steps = [
        ["topology", "generate", "hypercube", "--n", str(NODES), "--out", str(topology_file), "--run-id", run_id,
         "--sigma", str(sigma), "--dimension", str(DIMENSION), "--round-deadline", str(round_deadline_s),
         "--ids-per-process", str(ids_per_process), *protocol],
        ["data", "generate", str(topology_file), "--out", str(root / "data"), "--seed", str(DATA_SEED)],
        ["certs", str(topology_file), "--out", str(root / "certs")],
        ["compose", str(topology_file), "--data", str(root / "data"), "--out", str(root / "cluster"),
         "--image", image, "--certs", str(root / "certs"), *compose_options],
    ]
    for argv in steps:
        assert netdp(argv) == 0, f"netdp {' '.join(argv)} failed"
    topology = load_topology(topology_file)
    values = np.stack([load_vector(node_data_file(root / "data", v), DIMENSION) for v in range(topology.n)])
    return ComposeCluster(root, topology, values)


# --- what the nodes wrote --------------------------------------------------------------------


def read_node_log(cluster: ComposeCluster, node: int, name: str = VIEW_LOG_NAME) -> LogContents:
    return read_log(cluster.log_dir(node) / name)


def noisy_input(cluster: ComposeCluster, node: int) -> np.ndarray:
    """The node's clipped input plus the noise it drew, read back from its private log."""
    log = read_node_log(cluster, node, PRIVATE_LOG_NAME)
    assert log.damage is None, log.damage
    (private_input,) = log.of_kind("private_input")
    (noise,) = log.of_kind("noise")
    return from_tensor(private_input.value) + from_tensor(noise.value)


def read_estimate(cluster: ComposeCluster, node: int) -> np.ndarray:
    return np.asarray(json.loads((cluster.log_dir(node) / ESTIMATE_FILE).read_text())["value"])


def assert_estimates_are_noisy_mean(cluster: ComposeCluster) -> np.ndarray:
    """Every node's estimate is the mean of all noisy inputs (to the precision the rounds reach); returns it."""
    nodes = range(cluster.topology.n)
    noisy_mean = np.mean([noisy_input(cluster, v) for v in nodes], axis=0)
    for v in nodes:
        np.testing.assert_allclose(read_estimate(cluster, v), noisy_mean, rtol=1e-6, atol=1e-9, err_msg=f"node {v}")
    return noisy_mean


def assert_healthy_over_mtls(containers: dict[str, dict]) -> None:
    """docker keeps each container's last probes: every one answered SERVING to its own mTLS health probe."""
    for name, container in containers.items():
        probes = container["State"]["Health"]["Log"]
        assert any(p["ExitCode"] == 0 and p["Output"].strip() == "SERVING" for p in probes), (name, probes)


def audit_cleanly(cluster: ComposeCluster, out: Path) -> dict:
    """`netdp audit --with-private-logs` of the run folder: exit 0 and every check ok; returns report.json."""
    return audit_rundir(cluster.rundir, out, "--with-private-logs")


def audit_rundir(rundir: Path, out: Path, *options: str) -> dict:
    """`netdp audit RUNDIR` (no attack) with `options`: exit 0 and every check ok; returns report.json."""
    argv = ["audit", str(rundir), "--out", str(out), "--attack-pairs", "none", *options]
    status = netdp(argv)
    report = json.loads((out / "report.json").read_text())
    failed = [check for check in report["checks"] if not check["ok"]]
    assert status == 0 and report["checks"] and not failed, f"netdp audit exited {status}; failed checks: {failed}"
    return report


# --- driving the compose project -------------------------------------------------------------


def _stop(process: subprocess.Popen) -> None:
    """Terminate a helper process we started, killing it if it does not go within 5 s."""
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ComposeRun:
    """One compose project of a generated cluster: start it, watch it, inject faults, tear it down."""

    def __init__(self, cluster: ComposeCluster, project: str) -> None:
        if project != project.lower() or not project.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"compose would rename project {project!r}: use lowercase letters, digits, '-', '_'")
        self.cluster = cluster
        self.project = project
        # docker-compose prefixes the networks of the compose file with the project name.
        self.network = f"{project}_{NETWORK}"
        self._events_file = cluster.root / f"{project}-die-events.jsonl"
        self._ids: dict[int, str] = {}
        self._helpers: list[subprocess.Popen] = []  # the die-event watcher and the link delays

    def __enter__(self) -> ComposeRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def nodes(self) -> range:
        return range(self.cluster.topology.n)

    def compose(self, *args: str) -> subprocess.CompletedProcess:
        command = ["docker-compose", "-f", str(self.cluster.compose_file), "-p", self.project, *args]
        return subprocess.run(command, capture_output=True, text=True)

    def up(self) -> None:
        # docker keeps only its last few hundred events (health probes make many), so record
        # the exits of this project's containers as they happen.
        with open(self._events_file, "wb") as events:
            self._helpers.append(subprocess.Popen(
                ["docker", "events", "--filter", f"label=com.docker.compose.project={self.project}",
                 "--filter", "event=die", "--format", "{{json .}}"], stdout=events))
        result = self.compose("up", "-d")
        if result.returncode != 0:
            self.fail(f"docker-compose up failed: {result.stderr.strip()}")

    def down(self) -> None:
        """Stop the helpers and remove the containers, network and volumes (safe to call twice)."""
        for process in self._helpers:
            _stop(process)
        self._helpers.clear()
        result = self.compose("down", "-v", "--timeout", "1")
        assert result.returncode == 0, f"docker-compose down failed, containers may be left: {result.stderr}"

    def container(self, node: int) -> str:
        """The id of the container hosting node `node` (it keeps its id across restarts)."""
        if node not in self._ids:
            service = self.cluster.service(node)
            found = self.compose("ps", "-q", service).stdout.split()
            if len(found) != 1:
                self.fail(f"expected one container for {service}, found {found}")
            self._ids[node] = found[0]
        return self._ids[node]

    def containers(self) -> dict[str, dict]:
        """`docker inspect` of every container of the project, by service name."""
        ids = self._docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}").split()
        if not ids:
            return {}
        inspected = json.loads(self._docker("inspect", *ids))
        return {c["Config"]["Labels"]["com.docker.compose.service"]: c for c in inspected}

    def inspect(self, node: int) -> dict:
        (inspected,) = json.loads(self._docker("inspect", self.container(node)))
        return inspected

    def _docker(self, *args: str) -> str:
        """Run a docker command about this project; fail the test with its output and the containers' if it fails."""
        result = subprocess.run(["docker", *args], capture_output=True, text=True)
        if result.returncode != 0:
            self.fail(f"docker {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    # --- progress -------------------------------------------------------------------------

    def progress(self, node: int) -> int:
        """The highest round the node logged a sent record for, -1 before its first (torn tails are fine)."""
        path = self.cluster.log_dir(node) / VIEW_LOG_NAME
        try:
            return max((record.round for record in read_log(path).of_kind("sent")), default=-1)
        except LogFormatError:
            if path.exists() and path.stat().st_size > 0:
                raise
            return -1

    def wait_until_round(self, node: int, round_index: int, timeout_s: float) -> int:
        """Wait until the node has sent its round-`round_index` values; return the round it is at."""
        start = time.monotonic()
        checked = start
        while (reached := self.progress(node)) < round_index:
            now = time.monotonic()
            if now - start > timeout_s:
                self.fail(f"node {node} did not reach round {round_index} within {timeout_s:.0f}s (at {reached})")
            if now - checked > STATE_CHECK_S:  # `docker inspect` is slow next to the rounds: not every poll
                checked = now
                if self.inspect(node)["State"]["Status"] == "exited":
                    self.fail(f"node {node} exited at round {reached}, before round {round_index}")
            time.sleep(POLL_S)
        return reached

    def wait_all_exited(self, timeout_s: float) -> dict[str, dict]:
        """Wait until every service's container has exited; return their final `docker inspect` by service."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            containers = self.containers()
            if len(containers) == len(self.cluster.services) and all(
                    c["State"]["Status"] == "exited" for c in containers.values()):
                return containers
            time.sleep(1.0)
        self.fail(f"the cluster did not finish within {timeout_s:.0f}s")

    # --- faults ---------------------------------------------------------------------------

    def kill(self, node: int) -> None:
        self._docker("kill", "--signal", "KILL", self.container(node))

    def disconnect(self, node: int) -> None:
        self._docker("network", "disconnect", self.network, self.container(node))

    def reconnect(self, node: int) -> None:
        """Attach the node again under its service name, so its neighbours can resolve it."""
        self._docker("network", "connect", "--alias", self.cluster.service(node), self.network, self.container(node))

    def restart(self, node: int) -> None:
        """`docker restart`: SIGTERM, up to 10 s for the process to stop, then the same command again."""
        self._docker("restart", self.container(node))

    def slow_link(self, u: int, v: int, delay_ms: float) -> None:
        """Delay every packet between nodes u and v by delay_ms, each way; no other traffic is touched."""
        _require_host_tools("nsenter", "iptables")
        for here, there in ((u, v), (v, u)):
            pid = str(self.inspect(here)["State"]["Pid"])
            peer_ip = self.inspect(there)["NetworkSettings"]["Networks"][self.network]["IPAddress"]
            queue = str(there)  # one queue per delayed peer, in this node's own namespace
            helper = subprocess.Popen(
                ["nsenter", "-t", pid, "-n", sys.executable, str(LINK_DELAY_SCRIPT), "--queue", queue,
                 "--delay-ms", str(delay_ms)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self._helpers.append(helper)
            ready, _, _ = select.select([helper.stdout], [], [], HELPER_READY_TIMEOUT_S)
            said = helper.stdout.readline() if ready else ""
            if said.strip() != "ready":
                if helper.poll() is not None:
                    said += helper.stdout.read()
                self.fail(f"the link delay in node {here}'s namespace did not start within "
                          f"{HELPER_READY_TIMEOUT_S:.0f}s; it said: {said or '(nothing)'}")
            # --queue-bypass: should the helper die, packets pass undelayed instead of being dropped.
            rule = subprocess.run(
                ["nsenter", "-t", pid, "-n", "iptables", "-t", "mangle", "-A", "OUTPUT", "-d", f"{peer_ip}/32",
                 "-j", "NFQUEUE", "--queue-num", queue, "--queue-bypass"], capture_output=True, text=True)
            if rule.returncode != 0:
                self.fail(f"iptables in node {here}'s namespace refused the NFQUEUE rule: {rule.stderr.strip()}")

    # --- what docker saw ------------------------------------------------------------------

    def exits(self, node: int) -> list[tuple[float, int]]:
        """(unix time, exit code) of every process the node's container ran since up(), oldest first."""
        if not self._events_file.exists():
            raise RuntimeError("exits() knows only the runs this object started with up()")
        container = self.container(node)
        died = [json.loads(line) for line in self._events_file.read_text().splitlines() if line]
        return [(event["timeNano"] / 1e9, int(event["Actor"]["Attributes"]["exitCode"]))
                for event in died if event["Actor"]["ID"] == container]

    def logs(self, node: int) -> str:
        """Everything the node's container printed (stdout and stderr, every process it ran)."""
        result = subprocess.run(["docker", "logs", self.container(node)], capture_output=True, text=True)
        return result.stdout + result.stderr

    def fail(self, message: str) -> NoReturn:
        """Fail the test with the message and the last lines every container printed."""
        tail = self.compose("logs", "--no-color", "--tail", str(LOG_TAIL_LINES)).stdout
        pytest.fail(f"{message}\n--- last {LOG_TAIL_LINES} lines of each container ---\n{tail}")


def _require_host_tools(*tools: str) -> None:
    """Fault injection works from the host as root; say so plainly instead of skipping."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.fail(f"injecting this fault needs root and {', '.join(tools)} on the host "
                    f"(missing: {missing or 'none'}; uid {os.geteuid()})")
