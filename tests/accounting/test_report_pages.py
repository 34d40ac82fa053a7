"""Figures and the HTML page, drawn from a report document and its pairs file (fresh, and reloaded from disk).

A learning report (Muffliato-GD, with the `utility` block and the schedule comparison) also gets
its utility figure, the spread of pairwise losses per schedule, and a "Learning" section.
"""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
from scipy.linalg import expm

from coordinator_tools.audit.checks import loss_checks
from coordinator_tools.audit.figures import FIGURES, write_figures
from coordinator_tools.audit.html import PAGE_FILE, write_html
from coordinator_tools.audit.learning_figures import LEARNING_FIGURES
from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.plan import PlanOptions
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.audit.protocols.muffliato_gd.schedules import schedule_comparison
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.report import Report, build_report, write_report
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.rw_sgd import walk_facts
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.rw_sgd import RwSgdParams
from tests.accounting.simulated_run import fake_losses, ring_topology
from tests.accounting.test_gd_schedules import SENSITIVITY, gd_topology

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def sample_report(*, simulation: bool) -> Report:
    topology = ring_topology(n=8)
    losses = fake_losses(topology, attacked=((0, 1), (0, 2), (0, 3)))
    losses.paper_rdp[5, 1] = np.nan
    losses.exact_rdp_upper[6, 2] = np.inf
    kinds = {v: "simulation" if simulation else "secure" for v in range(topology.n)}
    return build_report(losses, planned_transcript(topology), checks=loss_checks(losses), sampler_kinds=kinds)


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
    assert f"on {2 * 8} of {8 * 7} pairs" in page


def test_report_figures_redraw_from_the_saved_document(tmp_path: Path) -> None:
    json_path, *_ = write_report(sample_report(simulation=False), tmp_path)
    reloaded = json.loads(json_path.read_text())
    figures = write_figures(reloaded, tmp_path / "again", tmp_path)
    assert all(path.read_bytes().startswith(PNG_SIGNATURE) for path in figures.values())
    page = write_html(reloaded, tmp_path / "again", figures).read_text()
    assert "Simulation sampler" not in page


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
