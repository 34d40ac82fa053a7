"""Fixtures of the docker-compose cluster test: images, the generated cluster, pytest-docker wiring.

The images are built once per session without any registry: the base image by
deploy/build-base-image.sh (kept when it exists), the node image by deploy/build-node-image.sh
from the current tree (docker's layer cache keeps the dependency layer). The cluster files are
made with the same `netdp` commands deploy/README.md documents.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.cli import main as netdp
from coordinator_tools.compose import COMPOSE_FILE, RUN_DIR
from coordinator_tools.datasets import node_data_file
from node.data import load_vector
from node.topology import Topology, load_topology

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "netdp-base:bookworm"
NODE_IMAGE = "netdp-node:latest"
NODES = 8
DIMENSION = 4
SIGMA = 0.05
# Long enough that every node serves across several 2 s health-probe intervals (a probe itself takes ~2 s).
ROUNDS = 300


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
    """An 8-node hypercube with mTLS certificates and a compose file, made with the `netdp` CLI."""
    root = tmp_path_factory.mktemp("compose-cluster")
    topology_file = root / "topology.json"
    steps = [
        ["topology", "generate", "hypercube", "--n", str(NODES), "--out", str(topology_file), "--run-id", "docker-test",
         "--sigma", str(SIGMA), "--rounds", str(ROUNDS), "--dimension", str(DIMENSION)],
        ["data", "generate", str(topology_file), "--out", str(root / "data"), "--seed", "11"],
        ["certs", str(topology_file), "--out", str(root / "certs")],
        ["compose", str(topology_file), "--data", str(root / "data"), "--out", str(root / "cluster"),
         "--image", node_image, "--certs", str(root / "certs")],
    ]
    for argv in steps:
        assert netdp(argv) == 0, f"netdp {' '.join(argv)} failed"
    topology = load_topology(topology_file)
    values = np.stack([load_vector(node_data_file(root / "data", v), DIMENSION) for v in range(topology.n)])
    return ComposeCluster(root, topology, values)


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
