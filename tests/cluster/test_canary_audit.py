"""The audit tests the real run: canaries planted by real node processes, scored from the logged views.

For every protocol whose contributions are real vectors, a multi-process run with canaries is
audited: neighbours, which see the source's contributions nearly directly, get a positive
empirical lower bound, and no pair's bound exceeds its exact loss. Then negative controls: the
same protocol with one node deliberately broken (noise drawn at a tenth of the published scale, a
raw contribution sent on the side, clipping skipped) must fail its audit with that node named,
while the honest run passes. The broken runs go through the same protocol code, receivers and
logs in one process (`--virtual`), which keeps the matrix of protocols and breaks fast; the
acceptance scripts and `test_a_node_at_a_quarter_of_sigma_fails_a_networked_audit` break a
networked run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import LaunchOptions, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.breaks import Breaks
from node.protocols.decor_gd import DecorGDParams
from node.protocols.muffliato import MuffliatoParams
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.protocols.params import LearningParams
from node.protocols.ring_sum import RingSumParams
from node.protocols.rw_sgd import RwSgdParams
from node.topology import NetworkParams, save_topology

pytestmark = pytest.mark.cluster
N, D, CANARIES, BROKEN = 6, 3, 400, 0  # node 0 draws noise in every protocol (ring-sum: at hop 0)
LEARNING = dict(sigma=0.25, sensitivity=0.5, alpha=2.0, dimension=D, task="logistic", learning_rate=0.5, clip=1.0,
                batch=4)
PROTOCOLS: dict[str, BaseModel] = {
    "muffliato": MuffliatoParams(sigma=0.5, sensitivity=1.0, alpha=2.0, rounds=3, dimension=D),
    "muffliato-async": MuffliatoAsyncParams(sigma=0.5, sensitivity=1.0, alpha=2.0, exchanges=6, dimension=D,
                                            tick_rate=40.0),
    "decor-gd": DecorGDParams(steps=3, gossip_rounds=1, sigma_cor_ratio=1.0, **LEARNING),
    "muffliato-gd": MuffliatoGDParams(steps=3, gossip_rounds=1, **LEARNING),
    "ring-sum": RingSumParams(sigma=0.5, sensitivity=1.0, alpha=2.0, dimension=D),
    "rw-sgd": RwSgdParams(steps=12, **LEARNING),
}


def files(root: Path, protocol: BaseModel) -> tuple[Path, Path]:
    """A ring of N nodes on free loopback ports and data whose inputs (or gradients) exceed the clip."""
    topology = build_topology(generate("ring", n=N), graph_name="ring", run_id=f"canary-{root.name}", protocol=protocol,
                              addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(N)],
                              network=NetworkParams(round_deadline_s=2.0, startup_deadline_s=30.0))
    save_topology(topology, root / "topology.json")
    if isinstance(protocol, LearningParams):
        rng = np.random.default_rng(0)
        (root / "data").mkdir(parents=True)
        for v in range(N):  # rows of norm 10: every example's gradient is clipped to C = 1
            x = 10.0 * rng.normal(size=(8, D))
            np.savez(root / "data" / f"node-{v}.npz", x=x, y=np.where(rng.random(8) < 0.5, -1.0, 1.0))
    else:
        write_node_files(synthetic_values(N, D, 20.0, seed=3), root / "data")  # norms far beyond Δ/2
    return root / "topology.json", root / "data"


def audited(root: Path, protocol: BaseModel, *, virtual: bool, breaks: Breaks | None = None,
            private: bool = False) -> dict:
    topology, data = files(root, protocol)
    options = LaunchOptions(sampler="simulation", simulation_seed=4, canaries=CANARIES,
                            breaks={} if breaks is None else {BROKEN: breaks})
    result = (run_virtual if virtual else run_cluster)(topology, data, root / "run", options)
    assert result.ok, result.failures
    return audit_run(result.rundir, root / "audit", AuditOptions(attack_pairs="none", attack_seed=1,
                                                                  with_private_logs=private))


def failed(report: dict) -> list[dict]:
    return [check for check in report["checks"] if not check["ok"]]


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_canaries_of_a_real_run_bound_the_neighbours_loss_from_below(name, tmp_path):
    report = audited(tmp_path, PROTOCOLS[name], virtual=False)
    assert not failed(report), failed(report)
    assert "canaries" in report and report["canaries"]["canaries"] == CANARIES
    bounds = [(pair["hop_distance"], pair["empirical"]["eps_lower"], pair["exact"]["eps_upper"])
              for pair in report["pairs"] if "empirical" in pair]
    assert bounds and all(lower <= upper + 1e-9 for _, lower, upper in bounds)
    assert max(lower for hops, lower, _ in bounds if hops == 1) > 0.0
    assert any("canary audit of the real run" in note for note in report["notes"])


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
@pytest.mark.parametrize("spec, check", [("noise-scale=0.1", "noise in the run's messages"),
                                         ("leak-raw", "every value that reached a node"),
                                         ("skip-clip", "every contribution was clipped")])
def test_a_broken_node_fails_the_audit_and_is_named(name, spec, check, tmp_path):
    report = audited(tmp_path, PROTOCOLS[name], virtual=True, breaks=Breaks.parsed([spec]),
                     private=spec == "skip-clip")
    failing = {entry["name"].split(" (")[0]: entry["detail"] for entry in failed(report)}
    assert any(found.startswith(check) for found in failing), failing
    detail = next(text for found, text in failing.items() if found.startswith(check))
    assert f"node {BROKEN}" in detail, detail


def test_a_node_at_a_quarter_of_sigma_fails_a_networked_audit(tmp_path):
    honest = audited(tmp_path / "honest", PROTOCOLS["muffliato"], virtual=False, private=True)
    broken = audited(tmp_path / "broken", PROTOCOLS["muffliato"], virtual=False,
                     breaks=Breaks(noise_scale=0.25), private=True)
    assert not failed(honest)
    failing = failed(broken)
    assert [check["name"] for check in failing] == ["noise in the run's messages is the published noise (canaries)"]
    assert f"node {BROKEN} 0." in failing[0]["detail"]  # its estimated noise std, named
    # The model's own checks cannot see it: the transcript reproduces every payload from the logged draws.
    assert next(c for c in broken["checks"] if c["name"].startswith("transcript"))["ok"]
