"""Fixtures for tests that start real node processes on loopback."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato import MuffliatoParams
from node.topology import NetworkParams, Topology, save_topology


@dataclass(frozen=True)
class ClusterFiles:
    topology: Topology
    topology_path: Path
    data_dir: Path
    values: np.ndarray
    root: Path


MakeClusterFiles = Callable[..., ClusterFiles]


def cluster_files_maker(base: Path) -> MakeClusterFiles:
    """A function that writes a topology with free loopback ports and synthetic data under `base`/NAME."""

    def make(kind: str = "hypercube", n: int = 8, *, sigma: float = 0.0, rounds: int = 40, dimension: int = 4,
             accelerated: bool = True, round_deadline_s: float = 2.0, startup_deadline_s: float = 30.0,
             seed: int = 7, name: str = "cluster", protocol: BaseModel | None = None) -> ClusterFiles:
        """Files of a synchronous Muffliato cluster, or of the given `protocol` (its dimension wins)."""
        root = base / name
        if protocol is None:
            protocol = MuffliatoParams(sigma=sigma, sensitivity=1.0, alpha=2.0, rounds=rounds,
                                       accelerated=accelerated, dimension=dimension)
        dimension = protocol.dimension
        topology = build_topology(
            generate(kind, n=n),
            graph_name=kind,
            run_id=f"test-{name}",
            protocol=protocol,
            addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(n)],
            network=NetworkParams(round_deadline_s=round_deadline_s, startup_deadline_s=startup_deadline_s),
        )
        save_topology(topology, root / "topology.json")
        values = synthetic_values(n, dimension, 1.0, seed)
        write_node_files(values, root / "data")
        return ClusterFiles(topology, root / "topology.json", root / "data", values, root)

    return make


@pytest.fixture
def make_cluster_files(tmp_path: Path) -> MakeClusterFiles:
    """Write a topology with free loopback ports and synthetic data, return their paths."""
    return cluster_files_maker(tmp_path)


@pytest.fixture(scope="module")
def make_module_cluster_files(tmp_path_factory: pytest.TempPathFactory) -> MakeClusterFiles:
    """`make_cluster_files` for module-scoped fixtures, e.g. one node process probed by several tests."""
    return cluster_files_maker(tmp_path_factory.mktemp("module-cluster"))
