"""The compose project of `netdp compose --pin` deployed as a Docker Swarm stack, collected and audited.

The topology publishes its 8 node ids at 2 addresses (`--ids-per-process 4`), so the stack has
2 services of 4 ids each (`netdp-node --nodes`), every id with its own data file, log folder
and view log, under one process certificate naming all four. The module makes a single-node
swarm on loopback, labels its one machine for every service, and runs `docker stack deploy
--resolve-image never` on the very file docker-compose runs (the locally built image, no
registry). `netdp collect` waits until every task has finished and copies the topology and
each id's public logs into a fresh run folder, which `netdp audit` must accept with every check
passing. The engine leaves swarm mode, and the networks the swarm made are removed, however
the tests end.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator_tools.cli import main as netdp
from coordinator_tools.collect import STACK_LABEL, stack_tasks
from coordinator_tools.compose import placement_label
from node.host import ESTIMATE_FILE
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME
from tests.docker.cluster_control import (
    NODES,
    ComposeCluster,
    assert_estimates_are_noisy_mean,
    assert_healthy_over_mtls,
    audit_rundir,
    make_compose_cluster,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

# Long enough (about 5 s of rounds) that every service serves across a few 2 s health-probe intervals.
ROUNDS = 200
SIGMA = 0.05
IDS_PER_PROCESS = 4
STACK = f"netdp-swarm-{os.getpid()}"
RUN_TIMEOUT_S = 300.0
REMOVAL_TIMEOUT_S = 60.0
SWARM_NETWORKS = {"ingress", "docker_gwbridge"}  # what `docker swarm init` creates


def docker(*args: str) -> str:
    result = subprocess.run(["docker", *args], check=False, capture_output=True, text=True)
    assert result.returncode == 0, f"docker {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
    return result.stdout


def swarm_networks() -> set[str]:
    return SWARM_NETWORKS & set(docker("network", "ls", "--format", "{{.Name}}").split())


@pytest.fixture(scope="module")
def swarm(node_image: str) -> Iterator[str]:
    """A single-node swarm on loopback for this module; yields its node id, leaves it afterwards."""
    state = docker("info", "--format", "{{.Swarm.LocalNodeState}}").strip()
    if state != "inactive":
        pytest.skip(f"the docker engine is already in swarm mode ({state}); this test only uses a swarm it made")
    networks_before = swarm_networks()
    try:
        docker("swarm", "init", "--advertise-addr", "127.0.0.1")
        yield docker("info", "--format", "{{.Swarm.NodeID}}").strip()
    finally:
        subprocess.run(["docker", "swarm", "leave", "--force"], check=False, capture_output=True)
        # Leaving removes the ingress overlay; the docker_gwbridge bridge that init made stays unless removed.
        for network in swarm_networks() - networks_before:
            subprocess.run(["docker", "network", "rm", network], check=False, capture_output=True)
        assert docker("info", "--format", "{{.Swarm.LocalNodeState}}").strip() == "inactive"


def remove_stack(stack: str) -> None:
    """`docker stack rm`, then wait until its containers and network are gone, so the swarm can be left cleanly."""
    subprocess.run(["docker", "stack", "rm", stack], check=False, capture_output=True)
    deadline = time.monotonic() + REMOVAL_TIMEOUT_S
    while time.monotonic() < deadline:
        containers = docker("ps", "-aq", "--filter", f"label={STACK_LABEL}={stack}").split()
        networks = docker("network", "ls", "-q", "--filter", f"label={STACK_LABEL}={stack}").split()
        if not containers and not networks:
            return
        time.sleep(1.0)


@pytest.fixture(scope="module")
def stack(swarm: str, node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeCluster]:
    """The 8-node mTLS cluster as 2 services of 4 ids, each pinned by label to the swarm's one machine, as a stack."""
    cluster = make_compose_cluster(tmp_path_factory.mktemp("swarm-stack"), node_image, run_id="swarm-test",
                                   sigma=SIGMA, protocol=("--protocol", "muffliato", "--rounds", str(ROUNDS)),
                                   ids_per_process=IDS_PER_PROCESS, compose_options=("--pin",))
    labels = [arg for ids in cluster.services.values() for arg in ("--label-add", f"{placement_label(ids)}=true")]
    docker("node", "update", *labels, swarm)
    try:
        docker("stack", "deploy", "--compose-file", str(cluster.compose_file), "--resolve-image", "never", STACK)
        yield cluster
    finally:
        remove_stack(STACK)


@pytest.fixture(scope="module")
def collected(stack: ComposeCluster) -> Path:
    """`netdp collect`: waits for the run's end, then gathers the run folder; it must find everything."""
    rundir = stack.root / "collected"
    assert netdp(["collect", STACK, "--out", str(rundir), "--timeout", str(RUN_TIMEOUT_S)]) == 0
    return rundir


def test_every_task_completes_on_its_labelled_machine(collected, stack, swarm):
    tasks = stack_tasks(STACK)
    assert sorted(tasks) == ["nodes-0-3", "nodes-4-7"] == sorted(stack.services)
    assert {name: (task.state, task.machine) for name, task in tasks.items()} == dict.fromkeys(
        tasks, ("complete", swarm))
    for name, ids in stack.services.items():
        (spec,) = json.loads(docker("service", "inspect", f"{STACK}_{name}"))
        assert spec["Spec"]["TaskTemplate"]["Placement"]["Constraints"] == [
            f"node.labels.{placement_label(ids)} == true"]
        # dnsrr: the name resolves to the task itself; the routing mesh's virtual IP would not answer here.
        assert spec["Spec"]["EndpointSpec"]["Mode"] == "dnsrr"
        args = spec["Spec"]["TaskTemplate"]["ContainerSpec"]["Args"]
        assert args[args.index("--nodes") + 1] == f"{ids[0]}-{ids[-1]}"


def test_every_service_was_healthy_over_mtls(collected, stack):
    """One probe per process, for its lowest id, over the process certificate naming all its ids."""
    ids = docker("ps", "-aq", "--filter", f"label={STACK_LABEL}={STACK}").split()
    containers = {c["Config"]["Labels"]["com.docker.swarm.service.name"].removeprefix(f"{STACK}_"): c
                  for c in json.loads(docker("inspect", *ids))}
    assert sorted(containers) == sorted(stack.services)
    assert_healthy_over_mtls(containers)


def test_estimates_are_the_noisy_average(collected, stack):
    """The bind-mounted logs are on this machine: every estimate is the mean of all noisy inputs."""
    assert_estimates_are_noisy_mean(stack)


def test_collected_run_folder_holds_the_public_logs_and_audits_cleanly(collected, stack, tmp_path):
    assert (collected / "topology.json").read_bytes() == (stack.rundir / "topology.json").read_bytes()
    for v in range(NODES):
        node_dir = collected / f"node-{v}"
        assert sorted(p.name for p in node_dir.iterdir()) == sorted([VIEW_LOG_NAME, ESTIMATE_FILE])
        assert (node_dir / VIEW_LOG_NAME).read_bytes() == (stack.log_dir(v) / VIEW_LOG_NAME).read_bytes()
        assert (stack.log_dir(v) / PRIVATE_LOG_NAME).is_file()  # written, and left where it was
    report = audit_rundir(collected, tmp_path / "audit")
    assert not report["replay"]["private_logs_read"]
