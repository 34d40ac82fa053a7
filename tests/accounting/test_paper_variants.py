"""The closed forms beside the exact column: one (ε, δ) basis, and which closed form undercounts where.

On the 5-cycle with 4 rounds of plain gossip every observer reconstructs every noisy input (exact =
local DP), while Theorem 1's sum for a source at distance 2 is 2722/2907 of it: undercounted by 7%
in RDP. The tight RDP conversion of that smaller μ is larger than the exact Gaussian profile's ε of
the local-DP μ, so converting the paper column that way made the pair look safe in ε; converted as
the exact column is, it is undercounted in ε too.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit import figures
from coordinator_tools.audit.checks import UNDERCOUNT_CHECK, loss_checks, paper_undercounts
from coordinator_tools.audit.conversion import gaussian_epsilon, gaussian_rdp_epsilon
from coordinator_tools.audit.figures import write_figures
from coordinator_tools.audit.html import write_html
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.protocols.muffliato.accountant import account
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.report import build_report, write_report
from tests.accounting.reference import topology_from_graph
from tests.accounting.simulated_run import fake_losses, ring_topology

ALPHA, SIGMA, DELTA = 3.0, 1.0, 1e-5
CYCLE, ROUNDS = 5, 4


def cycle_run():
    return planned_transcript(topology_from_graph(nx.cycle_graph(CYCLE), rounds=ROUNDS, accelerated=False))


def theorem1_share(u: int, v: int) -> Fraction:
    """Σ_{t<T} Σ_{w ∈ N(v)} (W^t)²_{w,u} / ‖(W^t)_w‖² on the cycle (Metropolis weights 1/3), in fractions."""
    weights = [[Fraction(1, 3) if (i - j) % CYCLE in (0, 1, CYCLE - 1) else Fraction(0) for j in range(CYCLE)]
               for i in range(CYCLE)]
    power = [[Fraction(int(i == j)) for j in range(CYCLE)] for i in range(CYCLE)]
    total = Fraction(0)
    for _ in range(ROUNDS):
        for w in ((v - 1) % CYCLE, (v + 1) % CYCLE):
            total += power[w][u] ** 2 / sum(x * x for x in power[w])
        power = [[sum(weights[i][k] * power[k][j] for k in range(CYCLE)) for j in range(CYCLE)]
                 for i in range(CYCLE)]
    return total


def test_a_pair_below_the_exact_loss_in_rdp_is_below_it_in_epsilon_too() -> None:
    losses = account(cycle_run(), sigma=SIGMA, sensitivity=1.0, alpha=ALPHA, delta=DELTA)
    share = theorem1_share(0, 2)
    assert share == Fraction(2722, 2907)
    assert losses.paper_rdp[0, 2] == pytest.approx(ALPHA / (2 * SIGMA**2) * float(share), rel=1e-14)
    assert losses.reconstructable[0, 2] and losses.exact_rdp[0, 2] == ALPHA / (2 * SIGMA**2)  # exact = local DP
    paper_mu, exact_mu = math.sqrt(float(share)) / SIGMA, 1.0 / SIGMA
    assert losses.exact_eps[0, 2] == gaussian_epsilon(exact_mu, DELTA)
    assert losses.paper_eps[0, 2] == pytest.approx(float(gaussian_epsilon(paper_mu, DELTA)), rel=1e-12)
    assert losses.paper_eps[0, 2] < losses.exact_eps[0, 2]
    # Through RDP the smaller μ would have looked safe: above the exact ε although below it in RDP.
    assert gaussian_rdp_epsilon(paper_mu, DELTA, alpha=ALPHA, conversion="tight") > losses.exact_eps[0, 2]
    off = ~np.eye(CYCLE, dtype=bool)
    below_in_rdp = losses.paper_rdp < losses.exact_rdp
    assert np.count_nonzero(below_in_rdp[off]) == 2 * CYCLE  # every pair at distance 2
    assert np.array_equal((losses.paper_eps < losses.exact_eps)[off], below_in_rdp[off])
    assert np.array_equal(paper_undercounts(losses), below_in_rdp)
    assert losses.paper_conversion == "tight"


def test_the_papers_own_conversion_is_a_labelled_reproduction_switch(tmp_path: Path) -> None:
    run = cycle_run()
    losses = account(run, sigma=SIGMA, sensitivity=1.0, alpha=ALPHA, delta=DELTA, conversion="paper")
    classic = losses.paper_rdp[0, 2] + math.log(1 / DELTA) / (ALPHA - 1)
    assert losses.paper_eps[0, 2] == pytest.approx(classic, rel=1e-15) and classic > losses.exact_eps[0, 2]
    assert np.array_equal(paper_undercounts(losses)[0], [False, False, True, True, False])  # still compared in RDP
    report = build_report(losses, run, checks=loss_checks(losses))
    assert report.document["summary"]["paper_conversion"] == "paper"
    assert any("classic conversion" in note and "compare the two in RDP" in note for note in report.document["notes"])
    write_report(report, tmp_path)
    page = write_html(report.document, tmp_path, {}).read_text()
    assert "not from the exact column&#x27;s Gaussian profile: compare the two in RDP" in page


def corrected_losses():
    """The hand-made ring losses (paper a third of exact on the 12 neighbour pairs) with a corrected column
    twice the exact loss everywhere but on 0 -> 3, where it is half of it."""
    topology = ring_topology(n=6)
    losses = fake_losses(topology)
    losses.paper_corrected_rdp = 2.0 * losses.exact_rdp
    losses.paper_corrected_rdp[0, 3] = losses.exact_rdp[0, 3] / 2.0
    losses.paper_corrected_eps = 2.0 * losses.exact_eps
    losses.paper_corrected_eps[0, 3] = losses.exact_eps[0, 3] / 2.0
    return topology, losses


def test_each_closed_form_says_how_many_pairs_it_undercounts_and_where(tmp_path: Path) -> None:
    topology, losses = corrected_losses()
    check = next(c for c in loss_checks(losses) if c.name == UNDERCOUNT_CHECK)
    assert check.ok and check.level == "warning"
    assert "the paper's bound undercounts 12 of 30 pairs (by up to 3x)" in check.detail
    assert "the corrected form (paper_corrected) undercounts 1 of 30 pairs (by up to 2x)" in check.detail
    report = build_report(losses, planned_transcript(topology), checks=[check])
    summary = report.document["summary"]
    assert summary["paper_undercounts"]["count"] == 12
    assert summary["paper_undercounts"]["by_hop_distance"] == [
        {"hop_distance": 1, "count": 12, "of": 12}, {"hop_distance": 2, "count": 0, "of": 12},
        {"hop_distance": 3, "count": 0, "of": 6}]
    corrected = summary["paper_corrected_undercounts"]
    assert corrected["count"] == 1 and corrected["pairs"] == [{"source": 0, "observer": 3, "exact_over_paper": 2.0}]
    assert corrected["by_hop_distance"][2] == {"hop_distance": 3, "count": 1, "of": 6}
    assert summary["mean_rdp_per_observer"]["paper_corrected"][3] == pytest.approx(
        sum(losses.paper_corrected_rdp[u, 3] for u in range(6) if u != 3) / 6)
    write_report(report, tmp_path)
    pairs = read_pairs(tmp_path)
    assert np.argwhere(pair_matrix(pairs, "paper_corrected_undercounts", 6) == 1).tolist() == [[0, 3]]
    assert np.count_nonzero(pair_matrix(pairs, "paper_undercounts", 6) == 1) == 12
    page = write_html(report.document, tmp_path, {}).read_text()
    assert ("the corrected closed form undercounts 1 of 30 pairs (by up to 2×): it is not an upper bound here (the "
            "exact loss of the whole view is above it); 1 of the 6 at hop distance 3.") in page
    assert "12 of the 12 at hop distance 1." in page
    assert "<th>paper (corrected) RDP</th><th>paper (corrected) ε</th>" in page


def test_without_a_corrected_form_there_is_no_corrected_verdict() -> None:
    topology = ring_topology(n=6)
    report = build_report(fake_losses(topology), planned_transcript(topology))
    summary = report.document["summary"]
    assert summary["paper_corrected_undercounts"] is None and "paper_corrected" not in summary["mean_rdp_per_observer"]
    assert report.pairs.columns["paper_corrected_undercounts"] is None


def test_loss_by_hop_draws_the_corrected_curve_and_labels_another_basis(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    topology, losses = corrected_losses()
    losses.paper_conversion = "paper"
    report = build_report(losses, planned_transcript(topology))
    write_report(report, tmp_path)
    drawn: list[str] = []
    monkeypatch.setattr(figures, "draw_by_distance", lambda axis, hops, distances, values, label, colour, offset:
                        drawn.append(label))
    write_figures(report.document, tmp_path, tmp_path)
    assert drawn[:3] == ["paper (closed form)", "paper (corrected)", "exact"]  # the RDP panel
    assert drawn[3:5] == ["paper (closed form, classic conversion: not exact's basis)",
                          "paper (corrected, classic conversion: not exact's basis)"]
