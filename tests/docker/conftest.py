"""Fixtures of the docker-compose tests: images, the baseline cluster, pytest-docker wiring.

The images are built once per session without any registry: the base image by
deploy/build-base-image.sh (kept when it exists), the node image by deploy/build-node-image.sh
from the current tree (docker's layer cache keeps the dependency layer). The base image build
starts in the background as soon as collection shows docker tests will run: it spends minutes
fetching and unpacking a root file system, mostly waiting on the network and the disk, while the
tests before the docker ones run. Every cluster, the
baseline's here and each fault scenario's, is made by cluster_control.make_compose_cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.docker.cluster_control import ComposeCluster, make_compose_cluster

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "netdp-base:bookworm"
NODE_IMAGE = "netdp-node:latest"
SIGMA = 0.05
# Long enough that every node serves across several 2 s health-probe intervals (a probe itself takes ~2 s).
ROUNDS = 300


_BASE_BUILD: list[tuple[subprocess.Popen[bytes], Path]] = []  # the background base image build, once started


def _docker_engine_reachable() -> bool:
    if shutil.which("docker") is None or shutil.which("docker-compose") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def _base_image_command() -> list[str]:
    return [str(REPO / "deploy" / "build-base-image.sh"), "--image", BASE_IMAGE]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the base image in the background when docker tests are among those collected."""
    if _BASE_BUILD or session.config.option.collectonly:
        return
    if not any(item.get_closest_marker("docker") for item in session.items):
        return
    if _docker_engine_reachable():
        log = Path(tempfile.mkstemp(prefix="netdp-base-image-", suffix=".log")[1])
        with log.open("wb") as out:
            _BASE_BUILD.append((subprocess.Popen(_base_image_command(), stdout=out, stderr=subprocess.STDOUT), log))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop a background build the session never waited for (it ended before its docker tests)."""
    for build, _ in _BASE_BUILD:
        if build.poll() is None:
            build.terminate()
            build.wait()


def _wait_for_base_image() -> None:
    """The base image, from the background build if one started, else built now; its log on failure."""
    if not _BASE_BUILD:
        subprocess.run(_base_image_command(), check=True)
        return
    build, log = _BASE_BUILD[0]
    if build.wait() != 0:
        pytest.fail(f"building the base image failed (exit {build.returncode}):\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="session")
def node_image() -> str:
    """Build (or reuse) the base image, then rebuild the node image from this tree."""
    if not _docker_engine_reachable():
        pytest.skip("docker engine or docker-compose not available")
    _wait_for_base_image()
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
