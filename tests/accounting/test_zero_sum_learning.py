"""Zero-sum learning (zero-sum-gd): the hidden-state share bound by hand, and a run audited from its real logs.

The networked run (real processes, mutual TLS) is tests/cluster/test_zero_sum_learning_cluster.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import PlanOptions, Target, summarize
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript, planned_transcript
from coordinator_tools.audit.protocols.zero_sum_gd.steps import share_geometry
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor, to_tensor
from node.noise import SimulationSampler
from node.protocols.zero_sum import SHARE_PURPOSE, share_step, zero_sum_coefficients
from node.protocols.zero_sum_gd import ZeroSumGDParams
from node.topology import NetworkParams, Topology, save_topology
from node.transport.inprocess import run_inprocess
from tests.accounting.test_gd_audit import local_data

N, D, EXAMPLES, STEPS, ETA = 8, 3, 12, 4, 0.5
OBSERVER, COALITION, EAVESDROPPER = ThreatModel(), ThreatModel(collusion=(0, 2)), ThreatModel(eavesdropper=True)
# On the path 0 - 1 - 2 with Metropolis weights (W_00 = 2/3, W_01 = 1/3; node 1: 1/3 each), from the shares'
# coefficients C[j][k] = [j = k] - W_ak / (d_a W_aj): a leaf's one sent share is (-1, 1/2), rho = 1/(5/4) = 4/5;
# the middle's share to 0 is (2/3, -1/3, -1/3), rho = 3/2; both of its sent shares, covariance
# [[2/3, -1/3], [-1/3, 2/3]], rho = 1^T [[2, 1], [1, 2]] 1 = 6.
LEAF, MIDDLE_ONE, MIDDLE_BOTH = 4 / 5, 3 / 2, 6.0
CLIP, BATCH = 1.0, 4  # Delta = 2C/b = 1/2: a step after the first moves its mean by f_s = f_(s-1) + 2C = f + 4 Delta


def path(steps: int, regularization: float = 0.0) -> Transcript:
    params = ZeroSumGDParams(sigma=1.0, sensitivity=2 * CLIP / BATCH, alpha=2.0, dimension=1, task="logistic",
                             steps=steps, learning_rate=ETA, clip=CLIP, batch=BATCH, regularization=regularization)
    topology = build_topology(nx.path_graph(3), graph_name="path", run_id="zsgd", protocol=params)
    return planned_transcript(topology, rounds=steps, accelerated=False)


def test_one_step_is_zero_sum_averagings_first_round_under_every_threat_model() -> None:
    """T = 1: node 0 sees the middle's one share (3/2) and nothing of node 2; the middle sees each leaf's (4/5); the
    coalition {0, 2} both of the middle's shares (6); an eavesdropper every sent share of every node."""
    q = share_geometry(path(1))
    np.testing.assert_allclose(q, [[np.nan, LEAF, 0.0], [MIDDLE_ONE, np.nan, MIDDLE_ONE], [0.0, LEAF, np.nan]],
                               rtol=1e-9)
    assert share_geometry(path(1), COALITION)[1, 0] == pytest.approx(MIDDLE_BOTH, rel=1e-9)
    eavesdropper = share_geometry(path(1), EAVESDROPPER)
    np.testing.assert_allclose(eavesdropper[:, 0], [np.nan, MIDDLE_BOTH, LEAF], rtol=1e-9)


def test_two_steps_add_the_second_steps_shares_at_the_grown_sensitivity() -> None:
    """T = 2, lambda = 0: f_1 = Delta + 2C = 5 Delta. Node 1 hears leaf 0 at both steps: 4/5 (1 + 25). Node 0 hears
    the middle at step 1, whose model mixed both its step-0 shares (6) and node 2's share to it (4/5, at f_0)."""
    q = share_geometry(path(2))
    assert q[0, 1] == pytest.approx(LEAF * (1 + 25), rel=1e-9)
    assert q[1, 0] == pytest.approx(MIDDLE_BOTH + MIDDLE_ONE * 25, rel=1e-9)
    assert q[2, 0] == pytest.approx(LEAF, rel=1e-9)


def test_the_regulariser_shrinks_the_carried_sensitivity() -> None:
    """lambda = 0.4, eta = 0.5: f_1 = |1 - 0.2| f_0 + 2C = (0.8 + 4) Delta."""
    assert share_geometry(path(2, regularization=0.4))[0, 1] == pytest.approx(LEAF * (1 + 4.8**2), rel=1e-9)


def test_a_dropped_value_raises_the_hidden_part_by_the_self_weight_it_takes() -> None:
    """Node 0 mixes nothing from node 1 at step 0: its realized self weight 1 over its planned 2/3 scales its hidden
    model by kappa = 3/2, so f_1 = 3/2 f_0 + 2C = 5.5 Delta in what node 1 hears of it at step 1."""
    planned = path(2)
    dropped = replace(planned, used=((frozenset(), *planned.used[0][1:]), *planned.used[1:]))
    assert share_geometry(dropped)[0, 1] == pytest.approx(LEAF * (1 + 5.5**2), rel=1e-9)


def gd_topology(sigma: float = 0.5) -> Topology:
    params = ZeroSumGDParams(sigma=sigma, sensitivity=2.0 / EXAMPLES, alpha=2.0, dimension=D, task="least_squares",
                             steps=STEPS, learning_rate=ETA, clip=1.0, batch=EXAMPLES)
    return build_topology(generate("hypercube", n=N), graph_name="hypercube", run_id="zero-sum-gd", protocol=params,
                          network=NetworkParams(round_deadline_s=1.0, startup_deadline_s=1.0))


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("zero-sum-gd")
    save_topology(gd_topology(), root / "topology.json")
    shards = local_data(np.random.default_rng(3))
    asyncio.run(run_inprocess(gd_topology(), shards, root, lambda v: SimulationSampler(v)))
    return root


def test_the_audit_recomputes_every_value_and_accounts_every_threat_model(learning_run: Path) -> None:
    root = learning_run
    report = audit_run(root, root / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    checks = {check["name"]: check["ok"] for check in report["checks"]}  # type: ignore[index]
    assert len(checks) >= 2 and all(checks.values()), checks
    details = " ".join(str(check["detail"]) for check in report["checks"])  # type: ignore[index]
    assert f"{2 * N * 3 * STEPS + N} logged payloads" in details  # every value sent and received, every output
    eps = pair_matrix(read_pairs(root / "audit", ["source", "observer", "exact_rdp_upper"]), "exact_rdp_upper", N)
    expected = share_geometry(planned_transcript(gd_topology(), rounds=STEPS, accelerated=False))
    np.testing.assert_allclose(eps, 2.0 * (2.0 / EXAMPLES / 0.5) ** 2 / 2 * expected, rtol=1e-9)
    paper = pair_matrix(read_pairs(root / "audit", ["source", "observer", "paper_rdp"]), "paper_rdp", N)
    assert np.all(np.isnan(paper))
    coalition = audit_run(root, root / "coalition", AuditOptions(attack_pairs="none", colluders=(0, 1)))
    assert coalition["threat_model"]["name"] != "eavesdropper"  # type: ignore[index]
    joint = pair_matrix(read_pairs(root / "coalition", ["source", "observer", "exact_eps_upper"]),
                        "exact_eps_upper", N)
    alone = pair_matrix(read_pairs(root / "audit", ["source", "observer", "exact_eps_upper"]), "exact_eps_upper", N)
    assert np.all(joint[2:, 0] >= alone[2:, 0] * (1 - 1e-12))
    audit_run(root, root / "eaves", AuditOptions(attack_pairs="none", eavesdropper=True))
    heard = pair_matrix(read_pairs(root / "eaves", ["source", "observer", "exact_eps_upper"]), "exact_eps_upper", N)
    off = ~np.eye(N, dtype=bool)  # one view, every value: the same loss for every observer column, above each one's
    assert np.all(np.isfinite(heard[off])) and np.all(heard[off] >= alone[off] * (1 - 1e-12))


def test_the_shares_sum_to_zero_and_the_network_sum_moves_by_the_gradients_alone(learning_run: Path) -> None:
    replay = replay_run(learning_run, with_private_logs=True)
    assert replay.private is not None
    topology = replay.topology
    largest = 0.0
    for node, draws in replay.private.draws.items():
        row = topology.weight_row(node)
        logged = {int(d.step): from_tensor(d.value) for d in draws if d.purpose == SHARE_PURPOSE}
        for step in range(STEPS):
            shares = {j: sum(c * logged[share_step(step, k, N)] for k, c in coefficients.items())
                      for j, coefficients in zero_sum_coefficients(row).items()}
            largest = max(largest, *(float(np.max(np.abs(z))) for z in shares.values()))
            assert np.max(np.abs(sum(row[j] * z for j, z in shares.items()))) <= 1e-12 * largest
    assert largest > 0.5
    gradients = sum(replay.private.inputs[v].sum(axis=0) for v in range(N))
    np.testing.assert_allclose(sum(replay.final_outputs.values()), -ETA * gradients, rtol=0, atol=1e-12)


def test_a_node_whose_draw_differs_from_its_values_fails_the_trajectory_check(learning_run: Path) -> None:
    """The same logs with one draw of node 0 scaled in its private log: the values it sent no longer recompute."""
    replay = replay_run(learning_run, with_private_logs=True)
    assert replay.private is not None
    draws = list(replay.private.draws[0])
    changed = viewlog_pb2.NoiseDraw()
    changed.CopyFrom(draws[0])
    changed.value.CopyFrom(to_tensor(1.1 * from_tensor(draws[0].value)))
    private = replace(replay.private, draws={**replay.private.draws, 0: (changed, *draws[1:])})
    checks = {check.name: check for check in auditor_named("zero-sum-gd").checks(replace(replay, private=private))}
    honest = {check.name: check for check in auditor_named("zero-sum-gd").checks(replay)}
    assert all(check.ok for check in honest.values())
    failed = [check for check in checks.values() if not check.ok]
    assert len(failed) == 1 and "not reproduced" in failed[0].detail


@pytest.mark.parametrize("rule", ["mean", "worst"])
def test_a_plan_calibrates_sigma_to_the_target(rule: str) -> None:
    auditor = auditor_named("zero-sum-gd")
    target = Target(epsilon=2.0, rule=rule)  # type: ignore[arg-type]
    plan = auditor.plan(gd_topology(), PlanOptions(delta=1e-5, target=target))
    assert summarize(plan.losses.exact_eps_upper, rule) <= 2.0 * (1 + 1e-6)
    assert summarize(plan.losses.exact_eps_upper, rule) >= 2.0 * (1 - 1e-3)
