"""An 8-node Muffliato run under docker-compose, with mutual TLS, audited afterwards.

pytest-docker brings the generated compose project up; the test waits until every node
container has exited, then checks what docker saw (exit codes, health probes over mTLS),
what the nodes wrote (estimates against the inputs and noise in their private logs, and
against the true mean), and that `netdp audit` accepts the run folder as it is.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.cli import main as netdp
from coordinator_tools.cluster.launch import node_log_dir
from node.codec import from_tensor
from node.peer import ESTIMATE_FILE
from node.viewlog import PRIVATE_LOG_NAME, read_log

# The first test also builds the images: up to a few minutes on a cold, busy machine.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]

RUN_TIMEOUT_S = 300.0
POLL_S = 1.0


def node_containers(project: str) -> dict[str, dict]:
    """`docker inspect` of every container of the compose project, by service name."""
    ids = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    if not ids:
        return {}
    inspect = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, check=True)
    inspected = json.loads(inspect.stdout)
    return {c["Config"]["Labels"]["com.docker.compose.service"]: c for c in inspected}


@pytest.fixture(scope="module")
def finished(docker_services, docker_compose_project_name: str, compose_cluster) -> dict[str, dict]:
    """Wait until every node container has exited; return their final `docker inspect`."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        containers = node_containers(docker_compose_project_name)
        if len(containers) == compose_cluster.topology.n and all(
            c["State"]["Status"] == "exited" for c in containers.values()
        ):
            return containers
        time.sleep(POLL_S)
    logs = subprocess.run(
        ["docker-compose", "-f", str(compose_cluster.compose_file), "-p", docker_compose_project_name,
         "logs", "--tail", "20"], capture_output=True, text=True,
    ).stdout
    pytest.fail(f"the cluster did not finish within {RUN_TIMEOUT_S:.0f}s; last logs:\n{logs}")


def test_every_node_exits_cleanly(finished, compose_cluster):
    assert sorted(finished) == sorted(f"node-{v}" for v in range(compose_cluster.topology.n))
    assert {name: c["State"]["ExitCode"] for name, c in finished.items()} == dict.fromkeys(finished, 0)


def test_every_node_was_healthy_over_mtls(finished):
    """docker keeps the last probes: each node answered SERVING to its own mTLS health probe."""
    for name, container in finished.items():
        probes = container["State"]["Health"]["Log"]
        assert any(p["ExitCode"] == 0 and p["Output"].strip() == "SERVING" for p in probes), (name, probes)


def noisy_input(log_dir: Path) -> np.ndarray:
    """The node's clipped input plus the noise it drew, read back from its private log."""
    log = read_log(log_dir / PRIVATE_LOG_NAME)
    assert log.damage is None
    (private_input,) = log.of_kind("private_input")
    (noise,) = log.of_kind("noise")
    return from_tensor(private_input.value) + from_tensor(noise.value)


def test_estimates_are_the_noisy_average_and_near_the_true_mean(finished, compose_cluster):
    n = compose_cluster.topology.n
    log_dirs = [node_log_dir(compose_cluster.rundir, v) for v in range(n)]
    noisy_mean = np.mean([noisy_input(d) for d in log_dirs], axis=0)
    true_mean = compose_cluster.values.mean(axis=0)
    # The average noise is N(0, sigma^2/n) per coordinate: 6 standard deviations never happen by chance.
    noise_bound = 6 * compose_cluster.topology.protocol.sigma / np.sqrt(n)
    for v, log_dir in enumerate(log_dirs):
        estimate = np.asarray(json.loads((log_dir / ESTIMATE_FILE).read_text())["value"])
        np.testing.assert_allclose(estimate, noisy_mean, rtol=1e-6, atol=1e-9, err_msg=f"node {v}")
        assert np.max(np.abs(estimate - true_mean)) < noise_bound, f"node {v}"
    assert not np.allclose(noisy_mean, true_mean, atol=1e-9), "the nodes added no noise"


def test_the_run_folder_audits_cleanly(finished, compose_cluster, tmp_path):
    out = tmp_path / "audit"
    argv = ["audit", str(compose_cluster.rundir), "--out", str(out), "--with-private-logs", "--attack-pairs", "none"]
    assert netdp(argv) == 0
    report = json.loads((out / "report.json").read_text())
    n = compose_cluster.topology.n
    assert len(report["pairs"]) == n * (n - 1)
    assert report["replay"]["private_logs_read"]
    assert report["checks"] and all(check["ok"] for check in report["checks"]), report["checks"]
