"""Muffliato-GD/SGD audited end to end from real view logs (in-process transport, real files).

A small least-squares run on a hypercube with one gossip round per step: the audit must name
the protocol, pass its checks, flag Thm 6 (Eq. 9) where it gives 0 to non-neighbours although
their gradients reach the observer a step later, and keep exact ≤ local DP and exact ≤ the
corrected closed form. A per-step Erdős–Rényi run audits too, with the realized graphs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.command import AuditOptions, audit_run
from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.plan import PlanOptions, Target, summarize
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.learning import LocalData
from node.noise import SimulationSampler
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.topology import ErdosRenyiSchedule, NetworkParams, save_topology
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
    assert np.all(pairs["paper_undercounts"][hops >= 2])
    assert np.all(exact <= ldp * (1 + RTOL))
    assert np.all(exact <= corrected * (1 + RTOL))
    # local DP sees every step's noisy gradient: T composed Gaussian mechanisms of μ = Δ/σ
    assert ldp[0] == pytest.approx(2.0 * STEPS * (2.0 / EXAMPLES) ** 2 / 2)


def test_a_graph_drawn_per_step_is_audited_with_the_realized_graphs(tmp_path):
    report = audited_run(tmp_path, schedule=ErdosRenyiSchedule(p=0.4, seed=5))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    pairs = read_pairs(tmp_path / "audit")
    exact, ldp = pairs["exact_rdp_upper"], pairs["ldp_rdp"]
    assert np.all(exact <= ldp * (1 + RTOL)) and np.any(exact < 0.5 * ldp)


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
