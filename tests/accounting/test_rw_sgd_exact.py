"""Random-walk DP-SGD's linearized column: the worst case over the directions of the source's gradient steps.

Each of u's steps is its own column (moved by at most Δ in its own direction), not one input
shifted the same way at every visit. The walk's segments between an observer's visits carry
independent noise, so the worst case is still every step in one direction, which
`theory.segment_exact_rdp` gives in closed form (c² Δ²/k per segment of k steps holding c of
u's): the interval must close on it, whatever the dimension. A small run audited in-process
reports that value at both ends of `linearized`, and its exact column, the proven bound, counts
u's steps before v's last visit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.protocols.rw_sgd import theory
from coordinator_tools.audit.protocols.rw_sgd.sensitivity import step_geometry
from coordinator_tools.audit.protocols.token_sum.run import simulated_walk
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.learning import LocalData
from node.noise import SimulationSampler
from node.protocols.rw_sgd import RwSgdParams
from node.topology import NetworkParams, Topology, save_topology
from node.transport.inprocess import run_inprocess

N, D, EXAMPLES = 8, 3, 6


def walk_topology(*, steps: int, cap: int | None = None, dimension: int = D, graph: str = "exponential",
                  sigma: float = 1.0) -> Topology:
    params = RwSgdParams(sigma=sigma, sensitivity=1.0, alpha=2.0, dimension=dimension, task="least_squares",
                         steps=steps, learning_rate=0.5, clip=1.0, contribution_cap=cap)
    return build_topology(generate(graph, n=N), graph_name=graph, run_id="rw-exact", protocol=params,
                          network=NetworkParams(round_deadline_s=1.0, startup_deadline_s=1.0))


@pytest.mark.parametrize("graph, steps, cap, dimension", [("exponential", 40, None, 1), ("exponential", 40, 3, 5),
                                                          ("complete", 30, None, 2), ("ring", 50, 4, 8)])
def test_the_interval_closes_on_the_segments_closed_form(graph: str, steps: int, cap: int | None,
                                                         dimension: int) -> None:
    """On simulated walks, both ends equal Σ over segments of c²/k (α = 2, σ = Δ = 1: RDP = the σ-free factor)."""
    topology = walk_topology(steps=steps, cap=cap, dimension=dimension, graph=graph)
    rng = np.random.default_rng(steps)
    for _ in range(3):
        walk = simulated_walk(topology, rng)
        path = walk.holders()
        closed = theory.segment_exact_rdp(path, theory.contributions(path, cap, N), N, 2.0, 1.0, 1.0)
        geometry = step_geometry(walk)
        off = ~np.eye(N, dtype=bool)
        np.testing.assert_allclose(geometry.lower[off], closed[off], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(geometry.upper[off], closed[off], rtol=1e-9, atol=1e-12)
        assert np.all(geometry.upper[off] >= closed[off])


def test_a_coalition_sees_more_and_never_less() -> None:
    """Observers 1 and 2 together: their segments are shorter, each member's loss is below the coalition's."""
    topology = walk_topology(steps=40)
    walk = simulated_walk(topology, np.random.default_rng(9))
    alone, together = step_geometry(walk), step_geometry(walk, ThreatModel(collusion=(1, 2)))
    for u in (0, 3, 4, 5, 6, 7):
        assert together.lower[u, 1] >= max(alone.upper[u, 1], alone.upper[u, 2]) - 1e-12
        assert together.lower[u, 1] == together.lower[u, 2]


def test_an_audited_run_reports_the_linearized_worst_case_at_both_ends_and_exact_counts_steps(tmp_path: Path) -> None:
    """A least-squares walk on 8 nodes run in-process: linearized's two ends are the closed form on the walk the logs
    show; exact.rdp is the upper end of the exact column, c αΔ²/(2σ²) with c the source's steps before the
    observer's last received model (the meaning of exact changed: it was the linearized value), no lower end;
    every check passes."""
    topology = walk_topology(steps=30, sigma=2.0)
    save_topology(topology, tmp_path / "topology.json")
    rng = np.random.default_rng(4)
    shards = []
    for _ in range(N):
        x = rng.normal(size=(EXAMPLES, D))
        shards.append(LocalData(x / np.linalg.norm(x, axis=1, keepdims=True), rng.normal(size=EXAMPLES)))
    asyncio.run(run_inprocess(topology, shards, tmp_path, lambda v: SimulationSampler(v)))
    report = audit_run(tmp_path, tmp_path / "audit", AuditOptions(with_private_logs=True, attack_pairs="none"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    pairs = read_pairs(tmp_path / "audit")
    upper, lower = (pair_matrix(pairs, name, N) for name in ("linearized_rdp_upper", "linearized_rdp"))
    path = report["token_walk"]["tokens"][0]["holders"]  # the walk the custody records show
    closed = theory.segment_exact_rdp(path, theory.contributions(path, None, N), N, report["alpha"], report["sigma"],
                                      report["sensitivity"])
    off = ~np.eye(N, dtype=bool)
    assert np.any(closed[off] > 0)
    np.testing.assert_allclose(upper[off], closed[off], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(lower[off], closed[off], rtol=1e-9, atol=1e-12)
    exact = pair_matrix(pairs, "exact_rdp_upper", N)
    np.testing.assert_array_equal(pair_matrix(pairs, "exact_rdp", N), exact)
    assert np.all(np.isnan(pair_matrix(pairs, "exact_rdp_lower", N)[off]))
    counts = np.zeros((N, N))
    for v in range(N):  # v receives the model after hop h − 1 when the token comes to it from another node
        seen = [h for h in range(1, len(path)) if path[h] == v and path[h - 1] != v]
        for u in range(N):
            counts[u, v] = sum(1 for j in range(max(seen, default=0)) if path[j] == u)
    unit = report["alpha"] * (report["sensitivity"] / report["sigma"]) ** 2 / 2
    np.testing.assert_allclose(exact[off], counts[off] * unit, rtol=1e-12)
    assert np.all(lower[off] <= exact[off] * (1 + 1e-9))
    assert np.all(exact[off] <= pair_matrix(pairs, "ldp_rdp", N)[off] * (1 + 1e-9))
