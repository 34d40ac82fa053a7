"""DECOR learning (decor-gd): the joint-step exact bound by hand, and a run audited from its real logs in one process.

The networked run (real processes, mutual TLS) is tests/cluster/test_decor_cluster.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import PlanOptions, Target, summarize
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.protocols.decor import edges
from coordinator_tools.audit.protocols.decor_gd import linear_model, step_noise
from coordinator_tools.audit.protocols.decor_gd.steps import step_geometry
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.accountant import learning_schedule, reachable_counts
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import fixed_schedule, unroll
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import LaunchOptions
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.codec import from_tensor
from node.learning import LocalData
from node.noise import SimulationSampler
from node.protocols.decor_gd import DecorGDParams
from node.topology import NetworkParams, Topology, save_topology
from node.transport.inprocess import run_inprocess
from tests.accounting.test_gd_audit import local_data

PATH_WEIGHTS = np.array([[2, 1, 0], [1, 1, 1], [0, 1, 2]]) / 3.0  # Metropolis on the path 0 - 1 - 2
PATH_EDGES = [(0, 1), (1, 2)]
N, D, EXAMPLES, STEPS = 8, 3, 12, 4


def path_geometry(steps: int, threat_model: ThreatModel = ThreatModel(), ratio: float = 1.0) -> np.ndarray:
    return step_geometry(unroll(fixed_schedule(PATH_WEIGHTS, steps=steps, rounds=1)), PATH_EDGES, ratio, threat_model)


def test_an_eavesdropper_sees_one_step_through_the_laplacian() -> None:
    """T = 1, r = 1: every state in view, both edges unknown: (I + L)^-1 = [[5, 2, 1], [2, 4, 2], [1, 2, 5]] / 8."""
    q = path_geometry(1, ThreatModel(eavesdropper=True))
    for v in range(3):
        expected = np.array([5 / 8, 1 / 2, 5 / 8])
        expected[v] = np.nan
        np.testing.assert_allclose(q[:, v], expected, rtol=1e-12)


def test_a_curious_end_holds_its_edge_and_the_middle_holds_both() -> None:
    """T = 1: node 1 knows both edges' draws, so its neighbours' steps are local DP (1); node 0 sees node 1's state
    behind the edge (1, 2) it does not hold: 1 / (1 + r^2) = 1/2, and nothing of node 2."""
    q = path_geometry(1)
    assert q[0, 1] == pytest.approx(1.0) and q[2, 1] == pytest.approx(1.0)
    assert q[1, 0] == pytest.approx(0.5, rel=1e-12) and q[2, 0] == 0.0


def test_two_steps_compose_each_steps_joint_release() -> None:
    """T = 2 at node 0: step 0's states of 1 and 2 reach it (through 1's mixed model), edge (1, 2) unknown:
    [[2, -1], [-1, 2]]^-1 has diagonal 2/3; step 1's state of node 1 alone: 1/2. So q(1 -> 0) = 7/6, q(2 -> 0) = 2/3."""
    q = path_geometry(2)
    assert q[1, 0] == pytest.approx(7 / 6, rel=1e-12) and q[2, 0] == pytest.approx(2 / 3, rel=1e-12)


def test_without_pairwise_noise_the_bound_is_muffliato_gds_count_of_reached_steps() -> None:
    run = unroll(fixed_schedule(PATH_WEIGHTS, steps=3, rounds=1))
    for model in (ThreatModel(), ThreatModel(collusion=(0, 2))):
        np.testing.assert_allclose(step_geometry(run, PATH_EDGES, 0.0, model), reachable_counts(run, model),
                                   rtol=1e-12)
        assert np.nanmax(step_geometry(run, PATH_EDGES, 5.0, model) - reachable_counts(run, model)) <= 0


def test_every_shared_draw_is_one_column_with_opposite_signs_at_its_two_ends() -> None:
    run = unroll(fixed_schedule(PATH_WEIGHTS, steps=2, rounds=1))
    model = linear_model(run, PATH_EDGES, 3.0)
    shared = [k for k, holders in enumerate(model.holders) if len(holders) == 2]
    assert len(shared) == 2 * len(PATH_EDGES) and np.all(model.scales[shared] == 3.0)
    step_zero = [i for i, (t, _, _) in enumerate(run.messages) if t == 0]  # θ_w^{0,0} = -(g + z + Σ s v): one draw
    first = model.noise_rows[step_zero][:, shared[0]]  # edge (0, 1) at step 0
    assert dict(zip((run.messages[i][2] for i in step_zero), first)) == {0: -1.0, 1: 1.0, 2: 0.0}
    assert model.holders[shared[0]] == (0, 1)


def gd_topology(**extra: object) -> Topology:
    params = DecorGDParams(sigma=0.5, sensitivity=2.0 / EXAMPLES, alpha=2.0, dimension=D, task="least_squares",
                           steps=STEPS, learning_rate=0.5, clip=1.0, batch=EXAMPLES, sigma_cor_ratio=2.0, **extra)
    return build_topology(generate("hypercube", n=N), graph_name="hypercube", run_id="decor-gd", protocol=params,
                          network=NetworkParams(round_deadline_s=1.0, startup_deadline_s=1.0))


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[LocalData]]:
    root = tmp_path_factory.mktemp("decor-gd")
    topology = gd_topology()
    save_topology(topology, root / "topology.json")
    shards = local_data(np.random.default_rng(3))
    asyncio.run(run_inprocess(topology, shards, root, lambda v: SimulationSampler(v)))
    return root, shards


def test_the_audit_recomputes_every_model_with_the_pairwise_draws(learning_run: tuple[Path, list[LocalData]]) -> None:
    root, _ = learning_run
    report = audit_run(root, root / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    checks = {check["name"]: check["ok"] for check in report["checks"]}  # type: ignore[index]
    assert checks and all(checks.values()), checks
    eps = pair_matrix(read_pairs(root / "audit", ["source", "observer", "exact_eps_upper"]), "exact_eps_upper", N)
    ldp = pair_matrix(read_pairs(root / "audit", ["source", "observer", "ldp_eps"]), "ldp_eps", N)
    assert np.all(eps[~np.isnan(eps)] <= ldp[~np.isnan(ldp)] * (1 + 1e-12))
    eavesdropper = audit_run(root, root / "eaves", AuditOptions(attack_pairs="none", eavesdropper=True))
    heard = pair_matrix(read_pairs(root / "eaves", ["source", "observer", "exact_eps_upper"]), "exact_eps_upper", N)
    assert eavesdropper["threat_model"]["name"] == "eavesdropper"  # type: ignore[index]
    seen = heard[~np.isnan(heard)]  # one view, every message: the same loss for every observer column
    assert np.ptp(seen) <= 1e-12 * seen[0] and seen[0] < 0.5 * float(np.nanmax(ldp))  # no secret held


def test_pairwise_terms_cancel_and_the_mean_model_moves_by_the_independent_noise(
        learning_run: tuple[Path, list[LocalData]]) -> None:
    root, _ = learning_run
    replay = replay_run(root, with_private_logs=True)
    assert replay.private is not None
    whole = step_noise(replay.topology, replay.private)
    own = {v: {d.step: from_tensor(d.value) for d in draws if d.purpose == "gradient"}
           for v, draws in replay.private.draws.items()}
    for step in range(STEPS):
        pairwise = sum(whole[v][step] - own[v][step] for v in range(N))
        largest = max(float(np.max(np.abs(whole[v][step] - own[v][step]))) for v in range(N))
        assert largest > 0.5 and np.max(np.abs(pairwise)) <= 1e-12 * largest
    gradients = sum(replay.private.inputs[v].sum(axis=0) for v in range(N))
    gradients = gradients + sum(own[v][s] for v in range(N) for s in own[v])
    outputs = sum(replay.final_outputs.values())
    np.testing.assert_allclose(outputs, -0.5 * gradients, rtol=0, atol=1e-12)


@pytest.mark.parametrize("rule", ["mean", "worst"])
def test_a_plan_calibrates_the_independent_noise_to_the_target(rule: str) -> None:
    topology = gd_topology()
    auditor = auditor_named("decor-gd")
    target = Target(epsilon=2.0, rule=rule)  # type: ignore[arg-type]
    plan = auditor.plan(topology, PlanOptions(delta=1e-5, target=target))
    sigma = plan.details["calibration"]["sigma"]["exact"]  # type: ignore[index]
    assert summarize(plan.losses.exact_eps_upper, rule) <= 2.0 * (1 + 1e-6)
    geometry = step_geometry(unroll(learning_schedule(planned_transcript(topology))),
                             edges(topology), 2.0, ThreatModel())
    muffliato = reachable_counts(unroll(learning_schedule(planned_transcript(topology))))
    assert np.nanmean(geometry) < 0.5 * np.nanmean(muffliato) and sigma > 0


def test_decors_theorem_1_is_the_paper_column_and_bounds_the_exact_loss(
        learning_run: tuple[Path, list[LocalData]]) -> None:
    """On the 8-hypercube without node v (a connected 7-node graph), SecLDP's α T Δ²/(2σ²)[1/n_H + 1/(1 + a_H r²)]."""
    root, _ = learning_run
    report = audit_run(root, root / "paper", AuditOptions(attack_pairs="none"))
    pairs = read_pairs(root / "paper", ["source", "observer", "exact_rdp_upper", "paper_rdp"])
    paper, exact = pair_matrix(pairs, "paper_rdp", N), pair_matrix(pairs, "exact_rdp_upper", N)
    topology = gd_topology()
    params = topology.protocol
    assert isinstance(params, DecorGDParams)
    for v in range(N):
        honest = [w for w in range(N) if w != v]
        adjacency = np.array([[float(b in topology.neighbours[a]) for b in honest] for a in honest])
        connectivity = np.linalg.eigvalsh(np.diag(adjacency.sum(axis=1)) - adjacency)[1]
        expected = params.alpha * STEPS * (params.sensitivity / params.sigma) ** 2 / 2 * (
            1 / len(honest) + 1 / (1 + connectivity * params.sigma_cor_ratio ** 2))
        np.testing.assert_allclose(paper[honest, v], expected, rtol=1e-9)
    reached = ~np.isnan(exact)
    assert np.all(exact[reached] <= paper[reached] * (1 + 1e-9))
    assert not any("does not cover" in note for note in report["notes"])  # type: ignore[union-attr]


@pytest.mark.parametrize("threat", [{}, {"eavesdropper": True}, {"colluders": (0, 3)}])
def test_the_canaries_of_a_run_bound_every_pair_from_below_and_never_above_exact(
        tmp_path: Path, threat: dict[str, object]) -> None:
    n = 6
    params = DecorGDParams(sigma=0.25, sensitivity=0.5, alpha=2.0, dimension=D, task="logistic", steps=3,
                           learning_rate=0.5, clip=1.0, batch=4, sigma_cor_ratio=1.0)
    save_topology(build_topology(generate("ring", n=n), graph_name="ring", run_id="decor-gd-canaries", protocol=params),
                  tmp_path / "topology.json")
    rng = np.random.default_rng(0)
    (tmp_path / "data").mkdir()
    for v in range(n):  # rows of norm about 10: every example's gradient is clipped
        np.savez(tmp_path / "data" / f"node-{v}.npz", x=10.0 * rng.normal(size=(8, D)),
                 y=np.where(rng.random(8) < 0.5, -1.0, 1.0))
    run = run_virtual(tmp_path / "topology.json", tmp_path / "data", tmp_path / "run",
                      LaunchOptions(sampler="simulation", simulation_seed=4, canaries=300))
    assert run.ok, run.failures
    report = audit_run(run.rundir, tmp_path / "audit", AuditOptions(attack_pairs="none", attack_seed=1, **threat))
    failed = [check["name"] for check in report["checks"] if not check["ok"]]  # type: ignore[index]
    assert not failed, failed
    assert report["canaries"]["canaries"] == 300  # type: ignore[index]
    bounds = [(pair["empirical"]["eps_lower"], pair["exact"]["eps_upper"])  # type: ignore[index]
              for pair in report["pairs"] if "empirical" in pair]  # type: ignore[union-attr]
    assert len(bounds) == n * (n - 1) and all(lower <= upper for lower, upper in bounds)
    assert max(lower for lower, _ in bounds) > 0.0
