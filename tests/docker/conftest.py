"""Fixtures of the docker-compose tests: images, the baseline cluster, pytest-docker wiring.

The images are built once per session without any registry: the base image by
deploy/build-base-image.sh (kept when it exists), the node image by deploy/build-node-image.sh
from the current tree (docker's layer cache keeps the dependency layer). Every cluster, the
baseline's here and each fault scenario's, is made by cluster_control.make_compose_cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.docker.cluster_control import ComposeCluster, make_compose_cluster

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "netdp-base:bookworm"
NODE_IMAGE = "netdp-node:latest"
SIGMA = 0.05
# Long enough that every node serves across several 2 s health-probe intervals (a probe itself takes ~2 s).
ROUNDS = 300


def _docker_engine_reachable() -> bool:
    if shutil.which("docker") is None or shutil.which("docker-compose") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def node_image() -> str:
    """Build (or reuse) the base image, then rebuild the node image from this tree."""
    if not _docker_engine_reachable():
        pytest.skip("docker engine or docker-compose not available")
    subprocess.run([REPO / "deploy" / "build-base-image.sh", "--image", BASE_IMAGE], check=True)
    subprocess.run([REPO / "deploy" / "build-node-image.sh", "--base", BASE_IMAGE, "--image", NODE_IMAGE], check=True)
    return NODE_IMAGE


@pytest.fixture(scope="session")
def compose_cluster(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> ComposeCluster:
    """The baseline: an 8-node hypercube with mTLS certificates and a compose file, made with the `netdp` CLI."""
    root = tmp_path_factory.mktemp("compose-cluster")
    return make_compose_cluster(root, node_image, run_id="docker-test", sigma=SIGMA,
                                protocol=("--protocol", "muffliato", "--rounds", str(ROUNDS)))


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    return "docker-compose"


@pytest.fixture(scope="session")
def docker_compose_file(compose_cluster: ComposeCluster) -> str:
    return str(compose_cluster.compose_file)


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"netdp-test-{os.getpid()}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    """docker-compose 1.29 has no `up --wait`; the test itself waits for the run to end."""
    return ["up -d"]
