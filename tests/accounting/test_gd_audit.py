"""Muffliato-GD/SGD audited end to end from real view logs (in-process transport, real files).

A small least-squares run on a hypercube with one gossip round per step: the audit must name
the protocol, pass its checks, give Thm 6 (Eq. 9) 0 for non-neighbours although their gradients
reach the observer a step later, make exact the proven bound c·αΔ²/(2σ²) (c: u's steps that reach
v's view, counted here from hop distances or from the realized graphs), and keep exact ≤ local DP
and the linearized column ≤ the corrected closed form (both are of the fixed-gradient model). A
per-step Erdős–Rényi run audits too, with the realized graphs.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import PlanOptions, Target, summarize
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.accountant import learning_schedule
from coordinator_tools.audit.protocols.muffliato_gd.unrolled import unroll
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.learning import LocalData
from node.noise import SimulationSampler
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.topology import ErdosRenyiSchedule, NetworkParams, erdos_renyi_edges, load_topology, save_topology
from node.transport.inprocess import run_inprocess

N, D, EXAMPLES, STEPS = 8, 3, 12, 4
RTOL = 1e-9


def local_data(rng: np.random.Generator) -> list[LocalData]:
    shards = []
    for _ in range(N):
        x = rng.normal(size=(EXAMPLES, D))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        shards.append(LocalData(x, x @ np.ones(D) + 0.1 * rng.normal(size=EXAMPLES)))
    return shards


def write_data(folder: Path, shards: list[LocalData], test: LocalData) -> None:
    folder.mkdir()
    for v, shard in enumerate(shards):
        np.savez(folder / f"node-{v}.npz", x=shard.x, y=shard.y)
    np.savez(folder / "test.npz", x=test.x, y=test.y)


def audited_run(root: Path, *, data: Path | None = None, **schedule: object) -> dict:
    params = MuffliatoGDParams(sigma=1.0, sensitivity=2.0 / EXAMPLES, alpha=2.0, dimension=D, task="least_squares",
                               steps=STEPS, gossip_rounds=1, learning_rate=0.5, clip=1.0, batch=EXAMPLES)
    topology = build_topology(generate("hypercube", n=N), graph_name="hypercube", run_id="gd-audit", protocol=params,
                              network=NetworkParams(round_deadline_s=1.0, startup_deadline_s=1.0), **schedule)
    save_topology(topology, root / "topology.json")
    shards = local_data(np.random.default_rng(3))
    if data is not None:
        write_data(data, shards, local_data(np.random.default_rng(4))[0])
    asyncio.run(run_inprocess(topology, shards, root, lambda v: SimulationSampler(v)))
    return audit_run(root, root / "audit", AuditOptions(with_private_logs=True, attack_pairs="none", data=data))


def test_the_audit_flags_eq9_for_non_neighbours_and_keeps_the_invariants(tmp_path):
    report = audited_run(tmp_path)
    assert report["protocol"] == "muffliato-gd"
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    pairs = read_pairs(tmp_path / "audit")
    hops = pairs["hop_distance"]
    paper, exact = pairs["paper_rdp"], pairs["exact_rdp_upper"]
    corrected, ldp = pairs["paper_corrected_rdp"], pairs["ldp_rdp"]
    assert np.all(paper[hops >= 2] == 0.0) and np.all(exact[hops >= 2] > 0.0)
    # u's step s reaches a neighbour w of v by step t ≤ T − 1 iff s ≤ T − h: c = T − h + 1 steps, composed
    unit = 2.0 * (2.0 / EXAMPLES) ** 2 / 2  # α (Δ/σ)² / 2
    np.testing.assert_allclose(exact, (STEPS - hops + 1) * unit, rtol=1e-12)
    assert np.all(np.isnan(pairs["exact_rdp_lower"])) and not np.any(pairs["exact_reconstructable"])
    assert np.all(exact <= ldp * (1 + RTOL))
    assert np.all(pairs["linearized_rdp_upper"] <= corrected * (1 + RTOL))
    assert np.all(pairs["linearized_rdp"] <= exact * (1 + RTOL))  # a block of a projection, zero off u's c steps
    # local DP sees every step's noisy gradient: T composed Gaussian mechanisms of μ = Δ/σ
    assert ldp[0] == pytest.approx(STEPS * unit)
    below = [check for check in report["checks"] if check["name"].startswith("paper bound")]
    assert [check["name"] for check in below] == ["paper bound vs exact (a proven upper bound)"]
    assert below[0]["level"] == "pass" and "no evidence that it undercounts" in below[0]["detail"]


def test_the_linearized_column_is_the_worst_case_over_each_steps_direction(tmp_path):
    """D = 3 > 1: the steps of u may move in different directions, and on some pairs that reveals more than any
    sign pattern (all 2^T of them, each accounted by the core's general formula on its own model). The linearized
    column's upper end is above every one, its lower end meets it (D = 3 reaches the relaxation's rank for T = 4);
    `exact_rdp` is the exact column's upper end, the proven bound, and `paper_undercounts` compares with it."""
    report = audited_run(tmp_path)
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    pairs = read_pairs(tmp_path / "audit")
    upper, lower = (pair_matrix(pairs, name, N) for name in ("linearized_rdp_upper", "linearized_rdp"))
    exact = pair_matrix(pairs, "exact_rdp_upper", N)
    np.testing.assert_array_equal(pair_matrix(pairs, "exact_rdp", N), exact)
    off = ~np.eye(N, dtype=bool)
    np.testing.assert_allclose(lower[off], upper[off], rtol=1e-9)
    paper = pair_matrix(pairs, "paper_rdp", N)
    undercounts = pair_matrix(pairs, "paper_undercounts", N).astype(bool)
    np.testing.assert_array_equal(undercounts[off], (paper < exact * (1 - 1e-9) - 1e-12)[off])
    topology = load_topology(tmp_path / "topology.json")
    run = unroll(learning_schedule(planned_transcript(topology, accelerated=False, rounds_per_step=1)))
    scale = report["alpha"] * (report["sensitivity"] / report["sigma"]) ** 2 / 2  # RDP of p = 1
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=STEPS)))
    best_signs = np.max([view_geometry(run.linear_model(np.tile(s, (N, 1))), method="float").upper for s in signs],
                        axis=0) * scale
    assert np.all(upper[off] >= best_signs[off] * (1 - 1e-9))
    assert np.count_nonzero(lower[off] > best_signs[off] * (1 + 1e-6)) >= N  # directions matter on some pairs


def reached_steps_by_hand(topology, steps: int) -> np.ndarray:
    """c [u, v] on per-step graphs, K = 1: the nodes u's step s has reached grow by one hop of each later step's
    graph; v hears its neighbours at every step t, so step s counts once one of them holds it at some t ≥ s."""
    n = topology.n
    graphs = [nx.Graph(erdos_renyi_edges(n, topology.schedule.p, topology.schedule.seed, t)) for t in range(steps)]
    counts = np.zeros((n, n))
    for u, s in itertools.product(range(n), range(steps)):
        holding, heard = {u}, set()
        for t in range(s, steps):
            heard |= {v for w in holding if w in graphs[t] for v in graphs[t][w]}
            holding |= {v for w in holding if w in graphs[t] for v in graphs[t][w]}
        for v in heard - {u}:
            counts[u, v] += 1
    np.fill_diagonal(counts, np.nan)
    return counts


def test_a_graph_drawn_per_step_is_audited_with_the_realized_graphs(tmp_path):
    report = audited_run(tmp_path, schedule=ErdosRenyiSchedule(p=0.4, seed=5))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    pairs = read_pairs(tmp_path / "audit")
    exact, ldp = pair_matrix(pairs, "exact_rdp_upper", N), pair_matrix(pairs, "ldp_rdp", N)
    unit = report["alpha"] * (report["sensitivity"] / report["sigma"]) ** 2 / 2
    counts = reached_steps_by_hand(load_topology(tmp_path / "topology.json"), STEPS)
    off = ~np.eye(N, dtype=bool)
    np.testing.assert_allclose(exact[off], counts[off] * unit, rtol=1e-12)
    assert np.all(exact[off] <= ldp[off] * (1 + RTOL)) and np.any(counts[off] < STEPS)
    linearized = pair_matrix(pairs, "linearized_rdp_upper", N)
    assert np.any(linearized[off] < 0.5 * ldp[off])


def test_the_utility_block_compares_the_run_with_central_and_local_baselines(tmp_path):
    report = audited_run(tmp_path / "run", data=tmp_path / "data")
    utility = report["utility"]
    assert utility["metric"] == "mse" and utility["steps"] == list(range(1, STEPS + 1))
    for curve in ("netdp", "central", "local"):
        assert len(utility[curve]) == STEPS and all(np.isfinite(utility[curve])), curve
    assert utility["test_examples"] == EXAMPLES
    test = local_data(np.random.default_rng(4))[0]
    assert utility["initial"] == pytest.approx(np.mean(test.y ** 2))  # the starting model θ = 0 predicts 0
    assert report["learning"]["schedule_comparison"]["planned"]["schedule"] == "erdos_renyi"


@pytest.mark.parametrize("rule", ["mean", "worst"])
def test_a_plan_with_a_target_calibrates_the_step_noise_and_its_baselines_compose_every_step(rule):
    """The calibrated σ meets the target and a little less noise misses it; LDP and central compose T steps."""
    params = MuffliatoGDParams(sigma=1.0, sensitivity=0.5, alpha=2.0, dimension=D, task="least_squares",
                               steps=STEPS, gossip_rounds=1, learning_rate=0.5, clip=1.0, batch=EXAMPLES)
    topology = build_topology(generate("hypercube", n=N), graph_name="hypercube", run_id="gd-plan", protocol=params)
    auditor, target = auditor_named("muffliato-gd"), Target(2.0, rule)
    planned = auditor.plan(topology, PlanOptions(target=target))
    sigmas = planned.details["calibration"]["sigma"]
    assert planned.losses.sigma == sigmas["exact"] > 0
    assert summarize(planned.losses.exact_eps_upper, rule) <= target.epsilon
    nearly = auditor.plan(topology, PlanOptions(sigma=sigmas["exact"] * 0.98))
    assert summarize(nearly.losses.exact_eps_upper, rule) > target.epsilon
    for name, releases in (("ldp", STEPS), ("central", STEPS / N)):
        mu = np.sqrt(releases) * params.sensitivity / sigmas[name]
        pairs = np.full((N, N), float(gaussian_epsilon(mu, planned.losses.delta)))
        np.fill_diagonal(pairs, np.nan)
        assert summarize(pairs, rule) == pytest.approx(target.epsilon, rel=1e-3)
    assert sigmas["central"] < sigmas["exact"] <= sigmas["ldp"]
