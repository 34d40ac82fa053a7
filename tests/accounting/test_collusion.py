"""Collusion: a coalition's joint view against a hand computation, the invariants, the refusals, the CLI."""

from __future__ import annotations

import itertools
import json

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.collusion import (
    Collusion,
    coalition_members,
    coalition_threat_model,
    require_joint_views,
)
from coordinator_tools.audit.conversion import gaussian_epsilon
from coordinator_tools.audit.html import PAGE_FILE
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.protocols.muffliato.accountant import account
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.report import hop_distances
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.topology import generators
from node.errors import ConfigError
from tests.accounting.plan_cli import run_plan
from tests.accounting.reference import topology_from_graph
from tests.accounting.simulated_async_run import async_topology
from tests.accounting.simulated_run import ring_topology, simulate_run

ALPHA, SIGMA, DELTA = 2.0, 1.0, 1e-5
LDP_RDP = ALPHA / (2 * SIGMA**2)
STAR = nx.star_graph(4)  # centre 0, leaves 1-4
COALITION = (1, 2)


def collusion_of(graph: nx.Graph, rounds: int, members: tuple[int, ...]) -> Collusion:
    topology = topology_from_graph(graph, rounds=rounds, accelerated=False, sigma=SIGMA, alpha=ALPHA)
    transcript = planned_transcript(topology)
    options = {"sigma": SIGMA, "sensitivity": 1.0, "alpha": ALPHA, "delta": DELTA}
    single = account(transcript, **options)
    joint = account(transcript, **options, threat_model=coalition_threat_model(ThreatModel(), members))
    return Collusion(members, joint, single, hop_distances(topology))


def dense_joint_rdp(graph: nx.Graph, rounds: int, members: tuple[int, ...], source: int) -> float:
    """Rényi divergence of the coalition's stacked view, written out: Metropolis W, x_w^t = (W^t z)_w heard by
    every neighbour for t < T, the members' z columns subtracted, D_α = α Δ² aᵀ (K Kᵀ)⁺ a / (2σ²)."""
    n = graph.number_of_nodes()
    weights = np.zeros((n, n))
    for i, j in graph.edges:
        weights[i, j] = weights[j, i] = 1 / (1 + max(graph.degree[i], graph.degree[j]))
    weights += np.diag(1 - weights.sum(axis=1))
    heard = sorted({(w, t) for v in members for w in graph.neighbors(v) for t in range(rounds)})
    rows = np.array([np.linalg.matrix_power(weights, t)[w] for w, t in heard])
    hidden = [k for k in range(n) if k not in members]
    view = rows[:, hidden]
    shift = view[:, hidden.index(source)]
    return float(ALPHA * shift @ np.linalg.pinv(view @ view.T) @ shift / (2 * SIGMA**2))


def test_two_leaves_of_a_star_learn_more_together_by_hand():
    """Star, T = 2: a leaf hears z_0 and the centre's mean (z_0 + ... + z_4)/5. Leaf 1 alone knows z_1 too, so
    it learns z_2 + z_3 + z_4 (p = 1/3 for each); leaves 1 and 2 together learn z_3 + z_4 (p = 1/2)."""
    collusion = collusion_of(STAR, 2, COALITION)
    assert collusion.sources == [0, 3, 4]
    assert collusion.joint.exact_method == "rational"
    joint = collusion.column("exact_rdp")
    assert joint == pytest.approx([LDP_RDP, LDP_RDP / 2, LDP_RDP / 2], rel=1e-15)
    _, alone = collusion.best_member("exact_rdp")
    assert alone[1:] == pytest.approx([LDP_RDP / 3] * 2, rel=1e-15) and alone[0] == LDP_RDP
    for i, source in enumerate(collusion.sources):
        assert joint[i] == pytest.approx(dense_joint_rdp(STAR, 2, COALITION, source), rel=1e-12)
    # Theorem 1 over the union {z_0, mean}: u's shares 1 + 1/5 (centre), 1/5 (leaves): the leaves are undercounted.
    assert collusion.column("paper_rdp") == pytest.approx([LDP_RDP * 6 / 5, LDP_RDP / 5, LDP_RDP / 5], rel=1e-14)
    block = collusion.to_json()
    assert block["colluders"] == [1, 2] and [row["source"] for row in block["losses"]] == [0, 3, 4]
    assert block["summary"]["paper_undercounts"] == 2 and block["summary"]["reconstructable_sources"] == 1
    gain = gaussian_epsilon(np.sqrt(1 / 2), DELTA) / gaussian_epsilon(np.sqrt(1 / 3), DELTA)  # μ² = p (Δ = σ = 1)
    assert block["summary"]["max_gain_over_best_member"] == pytest.approx(gain, rel=1e-9)
    assert block["losses"][0]["hop_distance"] == 1 and block["losses"][1]["hop_distance"] == 2
    assert all(check.ok for check in collusion.checks())
    assert collusion.sentence().startswith("Nodes 1-2 colluded")


def test_the_two_ends_of_a_path_together_reconstruct_everything_each_end_sees_by_hand():
    """Path 0-1-2-3-4-5, plain gossip, T = 2, Metropolis weights 1/3 on every edge. End 0 hears z_1 (round 1) and
    x_1^1 = (z_0 + z_1 + z_2)/3 (round 2): it solves for z_2, so sources 1 and 2 are at local DP and 3, 4 at 0;
    end 5 likewise reconstructs 4 and 3. Each end alone learns nothing of the far half; together they reconstruct
    all four middle nodes, so the coalition's loss is local DP for every source (on a path each round's message
    brings one new unknown, so a view reconstructs everything within T hops and nothing beyond)."""
    path = nx.path_graph(6)
    collusion = collusion_of(path, 2, (0, 5))
    assert collusion.sources == [1, 2, 3, 4]
    assert collusion.column("exact_rdp") == pytest.approx([LDP_RDP] * 4, rel=1e-15)
    single = collusion.single.exact_rdp
    assert single[[1, 2, 3, 4], 0] == pytest.approx([LDP_RDP, LDP_RDP, 0, 0], abs=1e-15)
    assert single[[1, 2, 3, 4], 5] == pytest.approx([0, 0, LDP_RDP, LDP_RDP], abs=1e-15)
    members, alone = collusion.best_member("exact_rdp")
    assert list(members) == [0, 0, 5, 5] and alone == pytest.approx([LDP_RDP] * 4, rel=1e-15)
    for source in collusion.sources:
        assert LDP_RDP == pytest.approx(dense_joint_rdp(path, 2, (0, 5), source), rel=1e-12)
    block = collusion.to_json()
    assert block["colluders"] == [0, 5] and block["summary"]["reconstructable_sources"] == 4


@pytest.mark.parametrize("seed", [3, 11])
def test_a_coalition_learns_at_least_each_member_and_at_most_local_dp(seed):
    graph = generators.erdos_renyi(10, seed=seed)
    for members in itertools.islice(itertools.combinations(range(10), 3), 0, 120, 40):
        collusion = collusion_of(graph, 3, members)
        assert all(check.ok for check in collusion.checks()), collusion.checks()
        joint = collusion.column("exact_rdp_upper")
        members_alone = collusion.single.exact_rdp[np.ix_(collusion.sources, members)]
        assert (joint[:, None] >= members_alone * (1 - 1e-9) - 1e-12).all()
        assert (collusion.column("exact_rdp") <= LDP_RDP * (1 + 1e-9)).all()
        assert np.isnan(collusion.joint.exact_rdp[list(members), members[0]]).all()
        for source in collusion.sources[:2]:
            i = collusion.sources.index(source)
            assert joint[i] == pytest.approx(dense_joint_rdp(graph, 3, members, source), rel=1e-6, abs=1e-9)


def test_coalitions_outside_the_run_or_without_sources_are_refused():
    with pytest.raises(ConfigError, match=r"nodes 7,9 not in this run's nodes 0\.\.5"):
        coalition_members((1, 7, 9), 6)
    with pytest.raises(ConfigError, match="at least two nodes"):
        coalition_members((2, 2), 6)
    with pytest.raises(ConfigError, match="no source is left"):
        coalition_members(range(6), 6)
    assert coalition_members((5, 3, 3), 6) == (3, 5)


@pytest.mark.parametrize("protocol", ["muffliato-gd", "ring-sum", "walk-sum", "rw-sgd", "personalized-cd"])
def test_protocols_without_a_sound_joint_view_refuse_colluders(protocol):
    with pytest.raises(ConfigError, match=f"--colluders is not supported for protocol {protocol}"):
        require_joint_views(auditor_named(protocol))


def test_plan_reports_the_coalition_ex_ante(tmp_path, capsys):
    topology = topology_from_graph(STAR, rounds=2, accelerated=False, sigma=SIGMA, alpha=ALPHA)
    code, document = run_plan(tmp_path, topology, "--colluders", "1,2")
    assert code == 0 and all(check["ok"] for check in document["checks"])
    assert any(check["name"].startswith("coalition nodes 1-2") for check in document["checks"])
    block = document["collusion"]
    assert block["colluders"] == [1, 2]
    assert [row["exact_rdp"] for row in block["losses"]] == pytest.approx([LDP_RDP, LDP_RDP / 2, LDP_RDP / 2],
                                                                          rel=1e-15)
    assert document["threat_model"]["colluding_observers"] == []  # the pairs stay single observers
    assert "Nodes 1-2 colluded" in capsys.readouterr().out


def test_plan_of_randomized_gossip_accounts_the_coalition_over_the_same_schedules(tmp_path):
    code, document = run_plan(tmp_path, async_topology(), "--colluders", "0,3", "--schedules", "4")
    assert code == 0 and all(check["ok"] for check in document["checks"]), document["checks"]
    assert {row["source"] for row in document["collusion"]["losses"]}.isdisjoint({0, 3})


def test_plan_refuses_colluders_outside_the_topology(tmp_path):
    with pytest.raises(ConfigError, match="not in this run's nodes"):
        run_plan(tmp_path, topology_from_graph(STAR, rounds=2, accelerated=False), "--colluders", "1,9")


def test_audit_of_a_simulated_run_reports_the_coalition(tmp_path):
    simulate_run(tmp_path / "run", ring_topology(6, rounds=3))
    options = AuditOptions(colluders=(0, 3), attack_runs=400, attack_seed=1)
    report = audit_run(tmp_path / "run", tmp_path / "audit", options)
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    block = report["collusion"]
    assert [row["source"] for row in block["losses"]] == [1, 2, 4, 5]
    assert block["summary"]["attacked_sources"] == 4
    assert all(row["model_attack_eps_lower"] <= row["exact_eps_upper"] for row in block["losses"])
    assert "Nodes 0,3 colluded" in (tmp_path / "audit" / PAGE_FILE).read_text()
    assert json.loads((tmp_path / "audit" / "report.json").read_text())["collusion"]["colluders"] == [0, 3]


def test_a_member_without_a_lower_end_is_no_evidence_for_the_coalition_check():
    """A single-observer column with no value the view reaches (a learning run's proven bound: null lower end) can
    neither pass nor fail `joint exact >= each member's own`: those sources are not checked, and the line says so
    as a warning; a joint value below a member's real lower end still fails."""
    collusion = collusion_of(STAR, 2, COALITION)
    collusion.single.exact_rdp_lower[:, 1] = np.nan
    collusion.single.exact_rdp_lower[:, 2] = np.nan
    below = collusion.checks()[0]
    assert below.ok and below.level == "warning" and "3 have none, so not checked" in below.detail
    collusion.single.exact_rdp_lower[0, 2] = 10.0  # a member's lower end above the joint upper end
    assert not collusion.checks()[0].ok
