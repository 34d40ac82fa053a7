"""8-node runs of two protocols under docker-compose, with mutual TLS, audited afterwards.

Synchronous Muffliato first: pytest-docker brings the generated compose project up; the
tests wait until every node container has exited, then check what docker saw (exit codes,
health probes over mTLS), what the nodes wrote (estimates against the inputs and noise in
their private logs, and against the true mean), and that `netdp audit` accepts the run
folder as it is. Then randomized Muffliato on the same images, as its own compose project:
every pairwise exchange crosses the docker network over mTLS, the noisy sum is conserved,
and its audit passes.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import read_pairs
from tests.docker.cluster_control import (
    ComposeCluster,
    ComposeRun,
    assert_estimates_are_noisy_mean,
    assert_healthy_over_mtls,
    audit_cleanly,
    make_compose_cluster,
    noisy_input,
    read_estimate,
)

# The first test also builds the images: up to a few minutes on a cold, busy machine.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]

RUN_TIMEOUT_S = 300.0
ASYNC_EXCHANGES = 200  # ticks per node, at 20 a second: about 10 s of exchanging
ASYNC_TICK_RATE = 20.0
ASYNC_SIGMA = 0.05
CONSERVED_RTOL = 1e-12


@pytest.fixture(scope="module")
def finished(docker_services, docker_compose_project_name: str, compose_cluster: ComposeCluster) -> dict[str, dict]:
    """Wait until every node container has exited; return their final `docker inspect`.

    pytest-docker owns this project's `up` and `down`; the run is only watched here.
    """
    return ComposeRun(compose_cluster, docker_compose_project_name).wait_all_exited(RUN_TIMEOUT_S)


def test_every_node_exits_cleanly(finished, compose_cluster):
    assert sorted(finished) == sorted(f"node-{v}" for v in range(compose_cluster.topology.n))
    assert {name: c["State"]["ExitCode"] for name, c in finished.items()} == dict.fromkeys(finished, 0)


def test_every_node_was_healthy_over_mtls(finished):
    assert_healthy_over_mtls(finished)


def test_estimates_are_the_noisy_average_and_near_the_true_mean(finished, compose_cluster):
    noisy_mean = assert_estimates_are_noisy_mean(compose_cluster)
    n = compose_cluster.topology.n
    true_mean = compose_cluster.values.mean(axis=0)
    # The average noise is N(0, sigma^2/n) per coordinate: 6 standard deviations never happen by chance.
    noise_bound = 6 * compose_cluster.topology.protocol.sigma / np.sqrt(n)
    assert np.max(np.abs(noisy_mean - true_mean)) < noise_bound
    assert not np.allclose(noisy_mean, true_mean, atol=1e-9), "the nodes added no noise"


def test_the_run_folder_audits_cleanly(finished, compose_cluster, tmp_path):
    report = audit_cleanly(compose_cluster, tmp_path / "audit")
    n = compose_cluster.topology.n
    assert report["pairs_file"]["rows"] == len(read_pairs(tmp_path / "audit")["source"]) == n * (n - 1)
    assert report["replay"]["private_logs_read"]


@pytest.fixture(scope="module")
def async_run(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[ComposeCluster, dict[str, dict]]:
    """A randomized-Muffliato cluster on the same images, run to its end as its own compose project."""
    root = tmp_path_factory.mktemp("compose-async")
    cluster = make_compose_cluster(root, node_image, run_id="docker-async", sigma=ASYNC_SIGMA, protocol=(
        "--protocol", "muffliato-async", "--exchanges", str(ASYNC_EXCHANGES), "--tick-rate", str(ASYNC_TICK_RATE)))
    with ComposeRun(cluster, f"netdp-async-{os.getpid()}") as run:
        run.up()
        return cluster, run.wait_all_exited(RUN_TIMEOUT_S)


def test_randomized_muffliato_conserves_the_noisy_sum(async_run):
    """Every node exits 0; atomic exchanges over the docker network keep the sum of noisy inputs to 1e-12."""
    cluster, containers = async_run
    assert {name: c["State"]["ExitCode"] for name, c in containers.items()} == dict.fromkeys(containers, 0)
    nodes = range(cluster.topology.n)
    noisy_sum = np.sum([noisy_input(cluster, v) for v in nodes], axis=0)
    estimates_sum = np.sum([read_estimate(cluster, v) for v in nodes], axis=0)
    assert np.max(np.abs(estimates_sum - noisy_sum)) <= CONSERVED_RTOL * np.max(np.abs(noisy_sum))
    assert not np.allclose([read_estimate(cluster, v) for v in nodes], cluster.values), "no exchange happened"


def test_the_randomized_run_audits_cleanly(async_run, tmp_path):
    cluster, _ = async_run
    report = audit_cleanly(cluster, tmp_path / "audit")
    assert report["protocol"] == "muffliato-async"
    assert len(read_pairs(tmp_path / "audit")["source"]) == cluster.topology.n * (cluster.topology.n - 1)
    assert report["run"]["exchanges"]["committed"] > 0
