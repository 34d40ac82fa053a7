"""`netdp demo --protocol muffliato-gd`: its parameters buy meaningful privacy and still learn.

The demo's own topology and data split, run in process with a seeded sampler (the real cluster
run is the acceptance script's), then audited with the data folder as the demo audits it: every
pairwise ε at δ = 1e-5 is single-digit, and the model beats local DP and the majority class by far.
The exact column is the proven bound, near local DP here (u's steps reach every node within T);
the mean below 4 that the demo was chosen for is the linearized value's, which is no bound.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.demo_protocols import MUFFLIATO_GD
from coordinator_tools.dataprep.learning_data import load_test_set
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.data import node_data_file
from node.errors import ConfigError
from node.learning import load_local_data
from node.noise import SimulationSampler
from node.topology import Topology, save_topology
from node.transport.inprocess import run_inprocess

DEMO = MUFFLIATO_GD


def demo_args(**given: object) -> argparse.Namespace:
    """What `netdp demo --protocol muffliato-gd` hands the protocol with nothing else on the command line."""
    return argparse.Namespace(**{"sigma": DEMO.sigma, "alpha": 2.0, "dimension": None, "sensitivity": None,
                                 "data_seed": 0, **given})


def demo_topology(n: int = 16) -> Topology:
    graph = generate("hypercube", n=n)
    return build_topology(graph, graph_name="hypercube", run_id="demo-gd", protocol=DEMO.params(demo_args(), graph))


def test_the_demo_learns_breast_cancer_at_single_digit_pairwise_epsilon(tmp_path: Path) -> None:
    topology = demo_topology()
    params = topology.protocol
    assert params.adjacency == "example" and params.sensitivity == 2 / 16
    save_topology(topology, tmp_path / "topology.json")
    DEMO.write_data(topology, tmp_path / "data", demo_args())
    shards = [load_local_data(node_data_file(tmp_path / "data", v), params) for v in range(topology.n)]
    asyncio.run(run_inprocess(topology, shards, tmp_path, lambda v: SimulationSampler(100 + v)))
    report = audit_run(tmp_path, tmp_path / "audit", AuditOptions(attack_pairs="none", data=tmp_path / "data"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    pairs = read_pairs(tmp_path / "audit", ["exact_eps_upper", "linearized_eps_upper", "ldp_eps"])
    eps = pairs["exact_eps_upper"]
    assert report["delta"] == 1e-5 and eps.max() < 10 and np.all(eps <= pairs["ldp_eps"] * (1 + 1e-9))
    assert pairs["linearized_eps_upper"].mean() < 4
    utility = report["utility"]
    _, _, test_y = load_test_set(tmp_path / "data")
    majority = max(np.mean(test_y > 0), np.mean(test_y < 0))
    assert utility["netdp"][-1] >= max(0.85, majority + 0.15, utility["local"][-1] + 0.05), utility
    assert report["learning"]["schedule_comparison"]["planned"]["schedule"] == "erdos_renyi"


def test_the_demo_refuses_nodes_left_without_a_whole_minibatch(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="fewer than the minibatch of 16: use fewer nodes"):
        DEMO.write_data(demo_topology(n=32), tmp_path / "data", demo_args())


@pytest.mark.parametrize("flag", ["dimension", "sensitivity"])
def test_the_learning_demo_refuses_the_averaging_options(flag: str) -> None:
    with pytest.raises(ConfigError, match=f"--{flag} does not apply to the muffliato-gd demo"):
        DEMO.params(demo_args(**{flag: 3}), generate("hypercube", n=16))
