"""Secure-neighbourhood learning (secure-neighbourhood-gd): the exact bound by hand, and a run in one process whose
masks cancel in its real logs and whose audit recomputes every masked value.

The networked run (real processes, mutual TLS) is tests/cluster/test_secure_neighbourhood_learning_cluster.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.secure_neighbourhood_gd import PAPER_NONE, account, planned_geometry
from coordinator_tools.audit.protocols.secure_neighbourhood_gd.masked_replay import masked_replay
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor, to_tensor
from node.noise import SimulationSampler
from node.pairwise_secrets import edge_sign
from node.protocols.secure_neighbourhood import MASK_PURPOSE, mask_step
from node.protocols.secure_neighbourhood_gd import SecureNeighbourhoodGDParams
from node.topology import NetworkParams, Topology, save_topology
from node.transport.inprocess import run_inprocess
from tests.accounting.test_gd_audit import local_data

N, D, EXAMPLES, STEPS, RATE, SIGMA = 8, 3, 12, 4, 0.5, 0.5


def params(steps: int, sensitivity: float = 2.0 / EXAMPLES) -> SecureNeighbourhoodGDParams:
    return SecureNeighbourhoodGDParams(sigma=SIGMA, sensitivity=sensitivity, alpha=2.0, dimension=D,
                                       task="least_squares", steps=steps, learning_rate=RATE, clip=1.0,
                                       batch=EXAMPLES)


def path(steps: int) -> Topology:
    return build_topology(nx.path_graph(3), graph_name="path", run_id="sn-gd-path", protocol=params(steps, 1.0),
                          network=NetworkParams(round_deadline_s=1.0, startup_deadline_s=1.0))


def test_on_the_path_each_observer_counts_the_steps_that_reach_it_with_every_mask_given() -> None:
    """T = 1: node 1 receives node 0's and node 2's step-0 models (masks given: seen whole), q = 1 each; node 0 hears
    node 1 alone, q(1 -> 0) = 1, q(2 -> 0) = 0. T = 2: node 1's model after step 0's gossip holds node 2's step 0,
    so node 0 counts node 1's two steps and node 2's first: q(1 -> 0) = 2, q(2 -> 0) = 1."""
    one = planned_geometry(planned_transcript(path(1)), ThreatModel())
    assert (one[0, 1], one[2, 1], one[1, 0], one[2, 0]) == (1.0, 1.0, 1.0, 0.0)
    two = planned_geometry(planned_transcript(path(2)), ThreatModel())
    assert (two[1, 0], two[2, 0], two[0, 2]) == (2.0, 1.0, 1.0)
    heard = planned_geometry(planned_transcript(path(2)), ThreatModel(eavesdropper=True))
    assert np.nanmin(heard) == np.nanmax(heard) == 2.0  # every step of every node is on the wire
    together = planned_geometry(planned_transcript(path(2)), ThreatModel(collusion=(0, 2)))
    assert together[1, 0] == together[1, 2] == 2.0  # the coalition sees node 1's two steps


def test_the_exact_column_is_the_gaussian_rdp_of_the_count_and_the_paper_column_is_empty() -> None:
    """RDP = α (Δ/σ)² q / 2 at α = 2, Δ = 1, σ = 1/2: 4 q; no paper column (K–K's form is for averaging)."""
    losses = account(planned_transcript(path(2)), sigma=SIGMA, sensitivity=1.0, alpha=2.0, delta=1e-5)
    assert losses.exact_rdp_upper[1, 0] == pytest.approx(8.0, rel=1e-12)
    assert losses.exact_rdp_upper[2, 0] == pytest.approx(4.0, rel=1e-12)
    assert np.all(np.isnan(losses.paper_rdp)) and losses.exact_is_bound


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("secure-neighbourhood-gd")
    network = NetworkParams(round_deadline_s=1.0, startup_deadline_s=1.0)
    topology = build_topology(generate("hypercube", n=N), graph_name="hypercube", run_id="sn-gd",
                              protocol=params(STEPS), network=network)
    save_topology(topology, root / "topology.json")
    shards = local_data(np.random.default_rng(3))
    asyncio.run(run_inprocess(topology, shards, root, lambda v: SimulationSampler(v)))
    return root


def test_the_masks_cancel_in_every_neighbourhood_sum_of_the_real_logs(learning_run: Path) -> None:
    """For every receiver v and round r, Σ_j Σ_k s_jk m^{(v)}_{jk,r} as each sender j logged its masks is 0 to 1e-12
    of the masks' size; so the network's models move by the gradients and their noise alone."""
    replay = replay_run(learning_run, with_private_logs=True)
    assert replay.private is not None
    topology = replay.topology
    masks = {(v, int(d.step)): from_tensor(d.value) for v, draws in replay.private.draws.items() for d in draws
             if d.purpose == MASK_PURPOSE}
    for r in range(STEPS):
        for v in range(N):
            around = topology.neighbours[v]
            terms = [edge_sign(j, k) * masks[j, mask_step(r, v, k, N)] for j in around for k in around if k != j]
            largest = max(float(np.max(np.abs(term))) for term in terms)
            assert largest > 0.5 and np.max(np.abs(sum(terms))) <= 1e-12 * largest
    own = [from_tensor(d.value) for draws in replay.private.draws.values() for d in draws if d.purpose == "gradient"]
    moved = sum(replay.private.inputs[v].sum(axis=0) for v in range(N)) + sum(own)
    np.testing.assert_allclose(sum(replay.final_outputs.values()), -RATE * moved, rtol=0, atol=1e-12)


def test_the_audit_recomputes_every_masked_value_and_bounds_every_threat_model(learning_run: Path) -> None:
    report = audit_run(learning_run, learning_run / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    checks = {check["name"]: (check["ok"], check["detail"]) for check in report["checks"]}  # type: ignore[index]
    assert checks and all(ok for ok, _ in checks.values()), checks
    compared = [detail for name, (_, detail) in checks.items() if "logged payloads" in detail]
    assert compared and not compared[0].startswith("0 ")
    pairs = read_pairs(learning_run / "audit", ["source", "observer", "exact_eps_upper", "ldp_eps"])
    eps, ldp = pair_matrix(pairs, "exact_eps_upper", N), pair_matrix(pairs, "ldp_eps", N)
    assert np.all(eps[~np.isnan(eps)] <= ldp[~np.isnan(ldp)] * (1 + 1e-12))
    assert PAPER_NONE in report["notes"]  # type: ignore[operator]
    # An eavesdropper sees every step's masked model of every node: with the masks given, every step counts once,
    # which is local DP's T steps; the bound claims nothing from the masks.
    heard = audit_run(learning_run, learning_run / "eaves", AuditOptions(attack_pairs="none", eavesdropper=True))
    assert heard["threat_model"]["name"] == "eavesdropper"  # type: ignore[index]
    wire = pair_matrix(read_pairs(learning_run / "eaves", ["source", "observer", "exact_eps_upper"]),
                       "exact_eps_upper", N)
    np.testing.assert_allclose(wire[~np.isnan(wire)], ldp[~np.isnan(wire)], rtol=1e-9)
    together = audit_run(learning_run, learning_run / "pair", AuditOptions(attack_pairs="none", colluders=(0, 1)))
    assert "collusion" in together and together["checks"]


def test_a_tampered_mask_fails_the_trajectory_check(learning_run: Path) -> None:
    """The check is the masks' too: a node that sent a value whose masks do not match its logs fails the audit."""
    replay = replay_run(learning_run, with_private_logs=True)
    assert replay.private is not None
    clean = masked_replay(replay)
    assert not clean.trajectories.mismatches and clean.trajectories.compared > 0
    draws = replay.private.draws[0]
    first = next(i for i, d in enumerate(draws) if d.purpose == MASK_PURPOSE)
    tampered = viewlog_pb2.NoiseDraw()
    tampered.CopyFrom(draws[first])
    tampered.value.CopyFrom(to_tensor(from_tensor(draws[first].value) + 1.0))
    replay.private.draws[0] = draws[:first] + (tampered,) + draws[first + 1:]
    assert masked_replay(replay).trajectories.mismatches
