"""DECOR's Theorem 1 (SecLDP) as the paper column: its value by hand, its soundness, and where it does not apply.

Theorem 1's factor per step is 1/n_H + 1/(1 + a_H r²) (σ = 1, r = σ_cor/σ), a_H the algebraic
connectivity of the graph of the nodes the adversary is not. On the 4-node ring the Laplacian's
eigenvalues are 0, 2, 2, 4 (a = 2); without node 0 the ring is the path 1-2-3, eigenvalues 0, 1, 3 (a = 1).
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx  # type: ignore[import-untyped]
import numpy as np
import pytest

from coordinator_tools import api
from coordinator_tools.audit.exact import view_geometry
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.decor import AUDITOR
from coordinator_tools.audit.protocols.decor_accountant import (
    DENSE_NODES,
    Condition,
    algebraic_connectivity,
    secldp,
    secldp_factor,
)
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from node.topology import Topology

RATIO = 2.0


def ring(rounds: int = 3, **params: object) -> Topology:
    return api.topology("ring", 4, protocol="decor", sigma=0.5, sigma_cor_ratio=RATIO, rounds=rounds, dimension=1,
                        alpha=4.0, sensitivity=1.0, run_id="decor-secldp", **params)


def test_theorem_one_by_hand_on_the_four_node_ring() -> None:
    topology = ring()
    eavesdropper = secldp_factor(topology, ThreatModel(eavesdropper=True), steps=3, ratio=RATIO)
    off = ~np.eye(4, dtype=bool)
    np.testing.assert_allclose(eavesdropper[off], 3 * (1 / 4 + 1 / (1 + 2 * RATIO**2)), rtol=1e-12)
    curious = secldp_factor(topology, ThreatModel(), steps=3, ratio=RATIO)
    np.testing.assert_allclose(curious[off], 3 * (1 / 3 + 1 / (1 + 1 * RATIO**2)), rtol=1e-12)
    assert np.all(np.isnan(np.diag(curious)))
    # A coalition {0, 2} leaves nodes 1 and 3, not adjacent: a = 0, the correlated noise buys nothing.
    coalition = secldp_factor(topology, ThreatModel(collusion=(0, 2)), steps=3, ratio=RATIO)
    np.testing.assert_allclose(coalition[[1, 3], 0], 3 * (1 / 2 + 1), rtol=1e-12)
    assert np.isnan(coalition[2, 0]) and np.isnan(coalition[0, 2])


def test_theorem_one_bounds_the_one_step_gaussian_from_above_and_the_exact_column_meets_it() -> None:
    # One step of Decor seen by an eavesdropper is N(x, σ² I + σ_cor² L): its loss for u is (Σ⁻¹)_uu, which the
    # audit's exact column computes from the rows (one round, every draw a column) and Theorem 1 bounds.
    graph = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (3, 4)])
    topology = api.topology(graph, protocol="decor", sigma=1.0, sigma_cor_ratio=RATIO, rounds=1, dimension=1,
                            alpha=2.0, sensitivity=1.0, run_id="decor-secldp-one")
    laplacian = nx.laplacian_matrix(graph, nodelist=range(5)).toarray()
    inverse = np.linalg.inv(np.eye(5) + RATIO**2 * laplacian)
    connectivity = np.sort(np.linalg.eigvalsh(laplacian))[1]
    outsider = ThreatModel(eavesdropper=True)
    exact = view_geometry(AUDITOR.linear_model(planned_transcript(topology, rounds=1, accelerated=False)),
                          outsider).upper
    bound = secldp_factor(topology, outsider, steps=1, ratio=RATIO)
    for u in range(5):
        v = (u + 1) % 5  # an eavesdropper's column is the same for every v
        assert exact[u, v] == pytest.approx(inverse[u, u], rel=1e-9)
        assert inverse[u, u] <= bound[u, v] and bound[u, v] == pytest.approx(1 / 5 + 1 / (1 + connectivity * RATIO**2))


def test_the_theorem_covers_a_run_only_when_every_condition_holds() -> None:
    topology = ring()
    met = secldp(topology, ThreatModel(), steps=3, ratio=RATIO, conditions=(Condition("c", True, "ok"),))
    assert met.covers and met.reason is None
    np.testing.assert_array_equal(met.column(), met.factor)
    colluding = secldp(topology, ThreatModel(collusion=(0, 1)), steps=3, ratio=RATIO, conditions=())
    assert not colluding.covers and "no collusion (nodes 0, 1 pool every secret they hold)" == colluding.reason
    assert np.all(np.isnan(colluding.column()))


@pytest.mark.parametrize("noisy_rounds", [None, 1])
def test_an_averaging_run_gets_an_empty_paper_column_with_the_reason_and_the_theorem_in_its_block(
        tmp_path: Path, noisy_rounds: int | None) -> None:
    extra = {} if noisy_rounds is None else {"noisy_rounds": noisy_rounds}
    topology = ring(**extra)
    values = np.random.default_rng(0).uniform(-0.25, 0.25, size=(4, 1))
    run = api.run(topology, api.write_data(values, tmp_path / "data"), tmp_path / "run", seed=2).check()
    audit = api.audit(run, tmp_path / "audit", attack_pairs="none")
    assert audit.ok, audit.checks[~audit.checks.ok]
    assert audit.pairs["paper_rdp"].isna().all() and audit.pairs["exact_rdp_upper"].notna().all()
    notes = " ".join(audit.report["notes"])  # type: ignore[arg-type]
    assert "does not cover this run" in notes and "Decor's D-SGD" in notes
    block = audit.report["decor"]["paper"]  # type: ignore[index]
    assert block["covers"] is False
    failed = {condition["name"] for condition in block["conditions"] if not condition["holds"]}
    assert failed == {"Decor's D-SGD"} | ({"both noises every step"} if noisy_rounds else set())
    steps = 3 if noisy_rounds is None else 1
    # RDP at α = 4, Δ = 1, σ = 0.5 per observer: α Δ²/(2σ²) · T (1/3 + 1/(1 + r²)), the same for every observer.
    np.testing.assert_allclose(block["rdp_per_observer"], [4 / (2 * 0.25) * steps * (1 / 3 + 1 / (1 + RATIO**2))] * 4,
                               rtol=1e-12)


@pytest.mark.parametrize("graph", [nx.hypercube_graph(7), nx.cycle_graph(100), nx.erdos_renyi_graph(150, 0.05, seed=1)],
                         ids=["hypercube-128", "ring-100", "erdos-renyi-150"])
def test_a_large_graph_s_algebraic_connectivity_is_never_overstated_and_the_same_every_time(graph: nx.Graph) -> None:
    # Beyond DENSE_NODES Lanczos finds a; a Ritz value lies above the eigenvalue, which would understate the loss.
    adjacency = nx.to_numpy_array(graph)
    assert adjacency.shape[0] > DENSE_NODES
    dense = float(np.sort(np.linalg.eigvalsh(np.diag(adjacency.sum(axis=1)) - adjacency))[1])
    found = algebraic_connectivity(adjacency)
    assert found == algebraic_connectivity(adjacency)
    assert dense - 1e-9 <= found <= dense
