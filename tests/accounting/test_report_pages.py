"""Figures and the HTML page, drawn from a report document and its pairs file (fresh, and reloaded from disk).

A learning report (Muffliato-GD, with the `utility` block and the schedule comparison) also gets
its utility figure, the spread of pairwise losses per schedule, and a "Learning" section.
"""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from PIL import Image
from scipy.linalg import expm

from coordinator_tools.audit import figures
from coordinator_tools.audit.checks import UNDERCOUNT_CHECK, loss_checks
from coordinator_tools.audit.figures import FIGURES, colorbar_ticks, observer_curves, tick_label, write_figures
from coordinator_tools.audit.html import PAGE_FILE, write_html
from coordinator_tools.audit.learning_figures import LEARNING_FIGURES
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import PlanOptions
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.schedules import schedule_comparison
from coordinator_tools.audit.protocols.rw_sgd import walk_facts
from coordinator_tools.audit.report import MEAN_RULE, Report, build_report, write_report
from coordinator_tools.audit.sentences import utility_sentence
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato import MuffliatoParams
from node.protocols.rw_sgd import RwSgdParams
from tests.accounting.simulated_run import fake_losses, ring_topology
from tests.accounting.test_gd_schedules import SENSITIVITY, gd_topology

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def sample_report(*, simulation: bool) -> Report:
    topology = ring_topology(n=8)
    losses = fake_losses(topology, attacked=((0, 1), (0, 2), (0, 3)))
    losses.paper_rdp[5, 1] = np.nan
    checks = loss_checks(losses)
    losses.exact_rdp_upper[6, 2] = losses.paper_rdp[6, 2] = np.inf  # figures and page draw an infinite loss
    kinds = {v: "simulation" if simulation else "secure" for v in range(topology.n)}
    return build_report(losses, planned_transcript(topology), checks=checks, sampler_kinds=kinds)


def test_report_figures_and_page_are_written(tmp_path: Path) -> None:
    written = sample_report(simulation=True)
    write_report(written, tmp_path)
    report = written.document
    figures = write_figures(report, tmp_path, tmp_path)
    assert set(figures) == set(FIGURES)
    for path in figures.values():
        assert path.read_bytes().startswith(PNG_SIGNATURE) and path.stat().st_size > 10_000
    page = write_html(report, tmp_path, figures).read_text()
    assert (tmp_path / PAGE_FILE).exists()
    for name in FIGURES.values():
        assert f'src="{name}"' in page
    assert 'href="pairs.parquet"' in page and 'href="pairs.csv"' in page
    for check in report["checks"]:
        assert check["name"].replace(">", "&gt;").replace("<", "&lt;") in page
    assert "Simulation sampler" in page and "observer_knows_own_noise" in page


def test_the_page_says_what_the_numbers_mean(tmp_path: Path) -> None:
    """Warning in amber, reconstructed pairs and means explained, ε beside every RDP column, the attack's limit."""
    written = sample_report(simulation=False)
    write_report(written, tmp_path)
    report = written.document
    page = write_html(report, tmp_path, write_figures(report, tmp_path, tmp_path)).read_text()
    undercount = next(check for check in report["checks"] if check["name"] == UNDERCOUNT_CHECK)
    assert undercount["ok"] and undercount["level"] == "warning"
    assert ('<tr class="warning"><td><span class="warning">⚠ warning</span></td><td>the paper&#x27;s bound '
            f"undercounts {2 * 8} pairs <small>({UNDERCOUNT_CHECK})</small></td>") in page  # named for its finding
    assert '<span class="ok">pass</span></td><td>exact &lt;= LDP' in page  # a real pass stays green
    assert (f"the paper&#x27;s closed-form bound undercounts {2 * 8} of {8 * 7} pairs (by up to 3×): it is not an "
            "upper bound here") in page
    assert (f"{2 * 8} of {8 * 7} pairs are reconstructed: the observer&#x27;s received combinations determine the "
            "source&#x27;s noisy input x_u + η_u, so that pair&#x27;s loss is exactly local DP.") in page
    assert page.count("over sources u ≠ v, divided by n") >= 2  # the summary table and the node-means caption
    assert ("<th>exact (upper end) RDP</th><th>exact (upper end) ε</th><th>exact (lower end) RDP</th>"
            "<th>exact (lower end) ε</th>") in page  # the proven bound first
    eps_mean = report["summary"]["mean_eps_per_observer"]["exact_upper"][0]
    assert f"<td>{eps_mean:.4g}</td>" in page
    assert "largest ε 7.756 over 3 pairs." in page  # the model attack's; no replay count: no limit to state
    assert "planted no canaries" not in page  # a plan tests no run
    assert "<h2>Faults</h2>" not in page  # a plan has no logs


def test_the_page_leads_with_the_mean_against_local_dp_and_eps_by_hop_distance(tmp_path: Path) -> None:
    """The headline and the loss-by-hop figure come before the run's metadata and the checks; identical observers
    share one summary row."""
    written = sample_report(simulation=False)
    write_report(written, tmp_path)
    report = written.document
    page = write_html(report, tmp_path, write_figures(report, tmp_path, tmp_path)).read_text()
    order = [page.index(marker) for marker in ("<h2>Headline</h2>", f'src="{FIGURES["loss_vs_hops"]}"',
                                               "<h2>Run</h2>", "<h2>Checks</h2>", "<h2>Summary</h2>",
                                               "<h2>Figures</h2>")]
    assert order == sorted(order) and page.count(f'src="{FIGURES["loss_vs_hops"]}"') == 1
    pairs = read_pairs(tmp_path, ["hop_distance", "exact_eps_upper", "ldp_eps"])
    mean, ldp = pairs["exact_eps_upper"].mean(), pairs["ldp_eps"].mean()
    worst = max(report["summary"]["mean_eps_per_observer"]["exact_upper"])
    assert (f"Mean exact ε at δ = 1e-05 over 56 pairs: {mean:.4g}, against local DP's {ldp:.4g} at the same "
            f"noise ({mean / ldp:.2f}x of it); the worst observer's mean {MEAN_RULE}: {worst:.4g}.") in page
    one_hop = pairs["exact_eps_upper"][pairs["hop_distance"] == 1]
    assert (f"<tr><td>1</td><td>16</td><td>{one_hop.mean():.4g}</td><td>{one_hop.max():.4g}</td>"
            f"<td>{one_hop.mean() / pairs['ldp_eps'][pairs['hop_distance'] == 1].mean():.2f}x</td></tr>") in page
    rows = page[page.index("<h2>Summary</h2>"):page.index("Baselines at the same noise")].count("<tr><td>")
    assert rows < 8 and "observers with identical values in one row" in page  # 8 observers, fewer distinct rows


def test_the_loss_by_hop_figure_marks_a_distance_whose_loss_is_zero() -> None:
    """A log axis cannot place 0: the distance still shows, as a marker on the floor named for it."""
    report = sample_report(simulation=False).document
    hops = np.repeat([1.0, 2.0, 3.0], 4)
    exact = np.array([2.0, 2.0, 3.0, 3.0, 0.5, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    figure = figures._loss_vs_hops(report, {"hop_distance": hops, "exact_rdp_upper": exact, "exact_eps_upper": exact})
    rdp_axis = figure.axes[0]
    labels = rdp_axis.get_legend_handles_labels()[1]
    assert "exact: 0 at this distance" in labels
    zero = next(c for c in rdp_axis.collections if c.get_label() == "exact: 0 at this distance")
    assert zero.get_offsets().tolist() == [[3.0, figures.ZERO_MARK_HEIGHT]]  # distance 3, on the axis' floor
    assert rdp_axis.get_xlim() == (0.5, 3.5)
    bars = next(line for line in rdp_axis.lines if line.get_label() == "exact" or line.get_marker() == "o")
    assert bars.get_ydata().tolist() == pytest.approx([2.5, 0.5])  # distance 2's mean counts its pair at 0


def test_the_heatmaps_colour_bar_is_labelled_readably_at_every_range() -> None:
    assert [tick_label(t) for t in colorbar_ticks(1e-3, 1e2)] == ["0.001", "0.01", "0.1", "1", "10", "100"]
    assert [tick_label(t) for t in colorbar_ticks(0.02, 0.9)] == ["0.02", "0.05", "0.1", "0.2", "0.5"]
    assert [tick_label(t) for t in colorbar_ticks(5.0, 5000.0)] == ["10", "30", "100", "300", "1000", "3000"]
    narrow = colorbar_ticks(1.0, 1.5)  # less than one 1-2-5 step: evenly spaced values, two digits
    assert len(narrow) >= 3 and [tick_label(t) for t in narrow] == ["1", "1.1", "1.3", "1.5"]
    assert tick_label(2e-6) == "2e-6" and tick_label(3e5) == "3e5" and tick_label(0.00025) == "0.00025"


def test_on_a_hypercube_the_per_observer_chart_shows_what_equal_node_means_hide(tmp_path: Path) -> None:
    topology = build_topology(generate("hypercube", n=16), graph_name="hypercube", run_id="hypercube-page",
                              protocol=MuffliatoParams(sigma=0.5, sensitivity=1.0, alpha=2.0, rounds=3,
                                                       accelerated=False, dimension=1))
    plan = auditor_named("muffliato").plan(topology, PlanOptions())
    json_path, *_ = write_report(build_report(plan.losses, plan.run), tmp_path)
    report = json.loads(json_path.read_text())
    means = report["summary"]["mean_rdp_per_observer"]["exact_upper"]
    assert max(means) == pytest.approx(min(means), rel=1e-9)  # every observer alike: flat bars of equal height
    distances, curves = observer_curves(16, read_pairs(tmp_path))
    assert list(distances) == [1, 2, 3, 4]
    np.testing.assert_allclose(curves, np.broadcast_to(curves[0], curves.shape), rtol=1e-9)
    eps = pair_matrix(read_pairs(tmp_path), "exact_eps_upper", 16)
    hops = pair_matrix(read_pairs(tmp_path), "hop_distance", 16)
    for j, distance in enumerate(distances):  # observer 0's mean over the sources at that distance
        assert curves[0, j] == pytest.approx(np.mean(eps[hops[:, 0] == distance, 0]))
    assert curves[0, 3] == 0.0 and curves[0, 1] < curves[0, 0]  # 3 rounds never reach 4 hops; loss decays
    figures = write_figures(report, tmp_path, tmp_path)
    assert figures["loss_by_observer"].read_bytes().startswith(PNG_SIGNATURE)
    page = write_html(report, tmp_path, figures).read_text()
    assert 'src="loss_by_observer.png"' in page and "the lines coincide" in page


def test_report_figures_redraw_from_the_saved_document(tmp_path: Path) -> None:
    json_path, *_ = write_report(sample_report(simulation=False), tmp_path)
    reloaded = json.loads(json_path.read_text())
    figures = write_figures(reloaded, tmp_path / "again", tmp_path)
    assert all(path.read_bytes().startswith(PNG_SIGNATURE) for path in figures.values())
    page = write_html(reloaded, tmp_path / "again", figures, report_dir=tmp_path).read_text()
    assert "Simulation sampler" not in page and "<h2>Headline</h2>" in page


def learning_report() -> Report:
    """A planned Muffliato-GD run on a 16-node ring with a made-up utility block and the real comparison."""
    topology = gd_topology("ring", 16, steps=6)
    plan = auditor_named("muffliato-gd").plan(topology, PlanOptions())
    accounting = {"sigma": 1.0, "sensitivity": SENSITIVITY, "alpha": 2.0, "delta": 1e-5,
                  "threat_model": ThreatModel(), "conversion": "tight"}
    utility = {"metric": "accuracy", "test_examples": 114, "steps": list(range(1, 7)), "initial": 0.63,
               "netdp": [0.7, 0.8, 0.85, 0.9, None, 0.93], "central": [0.8, 0.88, 0.9, 0.92, 0.93, 0.94],
               "local": [0.6, 0.65, 0.7, 0.72, 0.75, 0.77], "baselines": "simulated from the training files, seed 0"}
    learning = {"task": "logistic", "schedule_comparison": schedule_comparison(topology, plan.losses, accounting)}
    return build_report(plan.losses, plan.run, extra={"utility": utility, "learning": learning})


def test_a_learning_report_gets_its_utility_and_schedule_figures(tmp_path: Path) -> None:
    written = learning_report()
    json_path, *_ = write_report(written, tmp_path)
    report = written.document
    figures = write_figures(json.loads(json_path.read_text()), tmp_path, tmp_path)
    gd_figures = {"utility", "schedule_spread"}  # the random walk's communicability figure is not a GD run's
    assert set(figures) == set(FIGURES) | gd_figures
    for name in gd_figures:
        assert figures[name].read_bytes().startswith(PNG_SIGNATURE) and figures[name].stat().st_size > 10_000
    page = write_html(report, tmp_path, figures).read_text()
    for name in gd_figures:
        assert f'src="{LEARNING_FIGURES[name]}"' in page
    assert "<h2>Learning</h2>" in page and "Muffliato Fig. 1b" in page and "Muffliato Fig. 1c" in page
    assert "fixed graph ring, mean degree 2 (realized)" in page
    assert "Erdős–Rényi drawn every step, p = 0.133 (planned)" in page
    assert "<td>netdp</td><td>0.93</td>" in page and "<td>local</td><td>0.77</td>" in page
    assert ("Utility: test accuracy after step 6: netdp 0.93, central 0.94, local DP 0.77 (the starting model "
            "scores 0.63).") in page  # in the summary, not only in a figure


def test_a_learning_audit_without_data_says_its_utility_was_not_measured() -> None:
    report = {key: value for key, value in learning_report().document.items() if key != "utility"}
    assert utility_sentence(report) is None  # a plan: no run to measure
    assert utility_sentence({**report, "replay": {}}) == (
        "Utility: not computed: pass --data (the run's data folder) to measure the test metric.")


def test_an_averaging_report_has_no_learning_figures_or_section(tmp_path: Path) -> None:
    written = sample_report(simulation=False)
    write_report(written, tmp_path)
    report = written.document
    figures = write_figures(report, tmp_path, tmp_path)
    assert not set(figures) & set(LEARNING_FIGURES)
    assert "<h2>Learning</h2>" not in write_html(report, tmp_path, figures).read_text()


def test_a_random_walk_report_shows_its_loss_beside_the_graphs_communicability(tmp_path: Path) -> None:
    """A planned rw-sgd run on a 16-node hypercube at noise multiplier 2 (Thm 3 valid at alpha = 2)."""
    topology = build_topology(generate("hypercube", n=16), graph_name="hypercube", run_id="rw-page",
                              protocol=RwSgdParams(sigma=2.0, sensitivity=1.0, alpha=2.0, dimension=2,
                                                   task="logistic", steps=48, learning_rate=0.5, clip=0.5,
                                                   adjacency="dataset"))
    plan = auditor_named("rw-sgd").plan(topology, PlanOptions(schedules=5))
    accounting = {"sigma": 2.0, "sensitivity": 1.0, "alpha": 2.0}
    json_path, *_ = write_report(build_report(plan.losses, plan.run, extra={
        "rw_sgd": walk_facts(topology, np.full(16, 3), accounting)}), tmp_path)
    report = json.loads(json_path.read_text())
    assert report["rw_sgd"]["theorem3"]["order_valid"]
    expected = expm(nx.to_numpy_array(generate("hypercube", n=16)))
    np.fill_diagonal(expected, np.nan)  # a graph fact per ordered pair: the diagonal is no pair
    communicability = pair_matrix(read_pairs(tmp_path), "communicability", 16)
    assert np.allclose(communicability, expected, equal_nan=True)
    figures = write_figures(report, tmp_path, tmp_path)
    assert figures["communicability"].read_bytes().startswith(PNG_SIGNATURE)
    assert 'src="loss_vs_communicability.png"' in write_html(report, tmp_path, figures).read_text()


def test_a_run_without_noise_draws_node_means_at_its_usual_size(tmp_path: Path) -> None:
    # Every loss infinite and no closed form: the "inf" labels once stretched the tight figure to a million pixels.
    n = 100
    report = {"summary": {"mean_rdp_per_observer": {"exact_upper": [float("inf")] * n, "paper": [None] * n,
                                                    "ldp": [None] * n}},
              "baselines": {"ldp": {"rdp": None}, "central": {"rdp": None}}, "alpha": 2.0}
    figure = figures._node_means(report, {})
    figure.savefig(tmp_path / "node_means.png", dpi=figures.DPI, bbox_inches="tight")
    with Image.open(tmp_path / "node_means.png") as image:
        assert image.width < 3000 and image.height < 1000
