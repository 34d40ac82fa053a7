"""Random-walk DP-SGD (ICML 2024 Alg. 1) on real processes over gRPC, and its audit recomputed from the raw logs.

Every test runs 8 node processes on loopback on a published graph that is neither complete nor
a ring, with per-node training files as `netdp data split` writes them. Checked: the walk's model
learns a separable problem and least squares; no hop is taken twice when acknowledgements are
lost; the contribution cap holds in every private log; a sender-anonymous
run leaves no sender id in any receiver's records; and the audit's realized-path, linearized and
exact columns equal the closed forms computed here from the path read off the raw custody records.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.pairs_file import read_pairs
from coordinator_tools.audit.protocols.rw_sgd import theory
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.launch import ClusterResult, LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.learning import loss, metric
from node.mailboxes.token_slot import KEPT, RECEIVED
from node.protocols.rw_sgd import MODEL_TOKEN_ID, START, RwSgdParams
from node.protocols.token_sum import TOKEN
from node.topology import NetworkParams, Topology, save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster
N, D, EXAMPLES = 8, 4, 24


def unit_rows(rng: np.random.Generator, count: int) -> np.ndarray:
    x = rng.normal(size=(count, D))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def walk_cluster(root: Path, params: RwSgdParams, x: np.ndarray, y: np.ndarray, *, seed: int = 3,
                 lost_acks: dict[int, float] | None = None) -> tuple[Topology, ClusterResult]:
    """The 8-node exponential graph (degree 3): Metropolis rows with a self-loop of 1/4."""
    topology = build_topology(
        generate("exponential", n=N), graph_name="exponential", run_id=f"rw-{root.name}", protocol=params,
        addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(N)],
        network=NetworkParams(round_deadline_s=2.0, startup_deadline_s=30.0))
    save_topology(topology, root / "topology.json")
    (root / "data").mkdir(parents=True)
    for v, rows in enumerate(np.array_split(np.arange(len(y)), N)):
        np.savez(root / "data" / f"node-{v}.npz", x=x[rows], y=y[rows])
    options = LaunchOptions(sampler="simulation", simulation_seed=seed, lost_ack_fraction=lost_acks or {})
    return topology, run_cluster(root / "topology.json", root / "data", root / "run", options)


def walk_params(**fields: object) -> RwSgdParams:
    defaults = dict(sigma=0.0, sensitivity=2.0, alpha=2.0, dimension=D, task="logistic", steps=60,
                    learning_rate=1.0, clip=1.0, adjacency="dataset")
    return RwSgdParams(**{**defaults, **fields})


def path_from_logs(rundir: Path, steps: int) -> list[int]:
    """The holder of every step, read off the raw custody records (one take per hop, or the test fails)."""
    holders = {0: START}
    for v in range(N):
        for event in read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME).of_kind("token"):
            if event.token_id == MODEL_TOKEN_ID and event.phase in (RECEIVED, KEPT):
                assert event.hop not in holders, f"hop {event.hop} taken twice"
                holders[event.hop] = v
    assert sorted(holders) == list(range(steps))
    return [holders[hop] for hop in range(steps)]


def test_the_walks_model_learns_a_separable_problem(tmp_path):
    rng = np.random.default_rng(0)
    separator = unit_rows(rng, 1)[0]
    x, test_x = unit_rows(rng, N * EXAMPLES), unit_rows(rng, 1000)
    params = walk_params(steps=120, learning_rate=2.0)
    _, result = walk_cluster(tmp_path / "separable", params, x, np.sign(x @ separator))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    last = path_from_logs(result.rundir, params.steps)[-1]
    accuracy = metric("logistic", result.estimates()[last], test_x, np.sign(test_x @ separator))
    assert accuracy >= 0.95, accuracy


def test_noiseless_least_squares_reaches_the_centralized_objective(tmp_path):
    """From θ = 0 (200 to 600 times the optimum's loss) to within 10% of it: a constant step keeps the walk
    near the optimum (about 2% above it in simulations of this setup), not on it."""
    rng = np.random.default_rng(4)
    x = unit_rows(rng, N * EXAMPLES)
    y = x @ rng.normal(size=D) + 0.05 * rng.normal(size=len(x))
    params = walk_params(task="least_squares", steps=150, learning_rate=0.5, clip=10.0, sensitivity=20.0)
    _, result = walk_cluster(tmp_path / "squares", params, x, y)
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    model = result.estimates()[path_from_logs(result.rundir, params.steps)[-1]]
    optimum = loss("least_squares", np.linalg.lstsq(x, y, rcond=None)[0], x, y)
    assert loss("least_squares", model, x, y) <= 1.1 * optimum, (loss("least_squares", model, x, y), optimum)


def test_the_model_is_never_duplicated_when_acknowledgements_are_lost(tmp_path):
    """Odd nodes lose half the acknowledgements of what they take: a sender retries the same next holder, which
    takes the model once; no one leaves before its neighbours said `over`, so every retry finds its receiver."""
    rng = np.random.default_rng(3)
    x = unit_rows(rng, N * EXAMPLES)
    params = walk_params(steps=40)
    _, result = walk_cluster(tmp_path / "lossy", params, x, np.sign(x @ unit_rows(rng, 1)[0]),
                             lost_acks={v: 0.5 for v in range(1, N, 2)})
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    path = path_from_logs(result.rundir, params.steps)  # each hop taken exactly once
    retried = [s for v in range(N) for s in read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME).of_kind("sent")
               if s.kind == TOKEN and s.delivered and s.attempts > 1]
    assert retried, "no acknowledgement was lost: the test saw nothing"
    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(with_private_logs=True))
    assert all(check["ok"] for check in report["checks"]), [c for c in report["checks"] if not c["ok"]]
    assert report["token_walk"]["tokens"][0]["holders"] == path


def test_a_capped_noisy_walk_is_audited_as_the_closed_forms_computed_from_the_raw_logs(tmp_path):
    """σ = 2Δ (noise multiplier 2: Thm 3 valid at α = 2), a cap of 5 on 60 steps over 8 nodes (7.5 on average)."""
    rng = np.random.default_rng(1)
    x = unit_rows(rng, N * EXAMPLES)
    params = walk_params(sigma=4.0, contribution_cap=5)
    _, result = walk_cluster(tmp_path / "capped", params, x, np.sign(x @ unit_rows(rng, 1)[0]))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    path = path_from_logs(result.rundir, params.steps)
    visits = np.bincount(path, minlength=N)
    for v in range(N):  # the cap in every private log: gradients for the first 5 visits, noise at every one
        private = read_log(node_log_dir(result.rundir, v) / PRIVATE_LOG_NAME)
        assert len(private.of_kind("private_input")) == min(visits[v], 5), v
        assert [draw.step for draw in private.of_kind("noise")] == list(range(visits[v])), v
    assert visits.max() > 5, "no node went past the cap: the test would not see it"

    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions(with_private_logs=True))
    assert all(check["ok"] for check in report["checks"]), [c for c in report["checks"] if not c["ok"]]
    assert report["summary"]["attacked_pairs"] == N * (N - 1)  # the model attack ran (its bound <= exact: a check)
    assert any(note.startswith("model attack: canaries simulated") for note in report["notes"])
    bearing = theory.contributions(path, 5, N)
    realized = theory.realized_path_rdp(path, bearing, N, params.alpha, params.sigma, params.sensitivity)
    linearized = theory.segment_exact_rdp(path, bearing, N, params.alpha, params.sigma, params.sensitivity)
    # exact, the proven bound: u's gradient steps before the last model v received (it comes from another node)
    last_seen = [max((h for h in range(1, len(path)) if path[h] == v and path[h - 1] != v), default=0)
                 for v in range(N)]
    unit = params.alpha * (params.sensitivity / params.sigma) ** 2 / 2
    pairs = read_pairs(tmp_path / "audit")
    names = ("source", "observer", "realized_path_rdp", "linearized_rdp_upper", "exact_rdp_upper", "ldp_rdp",
             "paper_rdp")
    for u, v, path_rdp, linearized_rdp, exact_rdp, ldp_rdp, paper_rdp in zip(*(pairs[name] for name in names)):
        assert path_rdp == pytest.approx(realized[u, v], rel=1e-9, abs=1e-12), (u, v)
        assert linearized_rdp == pytest.approx(linearized[u, v], rel=1e-6, abs=1e-9), (u, v)
        steps = sum(1 for j in range(last_seen[v]) if path[j] == u and bearing[j])
        assert exact_rdp == pytest.approx(steps * unit, rel=1e-12), (u, v)
        assert linearized_rdp <= path_rdp * (1 + 1e-9) + 1e-12, (u, v)
        assert path_rdp <= exact_rdp * (1 + 1e-9) + 1e-12, (u, v)  # a step's amplified loss is at most its own
        assert exact_rdp <= ldp_rdp * (1 + 1e-9), (u, v)
        assert not np.isnan(paper_rdp)  # σ_m² = 4 = 2α(α − 1): the theorem holds at α = 2


def test_a_sender_anonymous_walk_leaves_no_sender_id_in_any_receivers_log(tmp_path):
    rng = np.random.default_rng(2)
    x = unit_rows(rng, N * EXAMPLES)
    params = walk_params(sigma=1.0, steps=40, sender="anonymous")
    _, result = walk_cluster(tmp_path / "anonymous", params, x, np.sign(x @ unit_rows(rng, 1)[0]))
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.nodes]
    received = 0
    for v in range(N):
        log = read_log(node_log_dir(result.rundir, v) / VIEW_LOG_NAME)
        models = [r for r in log.of_kind("received") if r.kind == TOKEN]
        received += len(models)
        assert not any(r.HasField("peer") for r in models), v
        assert not any(e.HasField("peer") for e in log.of_kind("token") if e.phase == RECEIVED), v
        assert all(r.claimed_sender == -1 for r in log.of_kind("rejected") if r.kind == TOKEN), v
    assert received > 0
    report = audit_run(result.rundir, tmp_path / "audit", AuditOptions())
    chain = next(check for check in report["checks"] if check["name"] == "token history is one unbroken chain")
    assert chain["ok"], chain  # the givers matched from the senders' forwards
    assert json.loads((tmp_path / "audit" / "report.json").read_text())["run"]["sender"] == "anonymous"
