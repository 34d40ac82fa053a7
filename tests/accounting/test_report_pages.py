"""Figures and the HTML page, drawn from a report document (fresh, and reloaded from disk)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from coordinator_tools.audit.checks import loss_checks
from coordinator_tools.audit.figures import FIGURES, write_figures
from coordinator_tools.audit.html import PAGE_FILE, write_html
from coordinator_tools.audit.report import PAIRS_FILE, build_report, write_report
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from tests.accounting.simulated_run import fake_losses, ring_topology

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def sample_report(*, simulation: bool) -> dict:
    topology = ring_topology(n=8)
    losses = fake_losses(topology, attacked=((0, 1), (0, 2), (0, 3)))
    losses.paper_rdp[5, 1] = np.nan
    losses.exact_rdp_upper[6, 2] = np.inf
    kinds = {v: "simulation" if simulation else "secure" for v in range(topology.n)}
    return build_report(losses, planned_transcript(topology), checks=loss_checks(losses), sampler_kinds=kinds)


def test_report_figures_and_page_are_written(tmp_path: Path) -> None:
    report = sample_report(simulation=True)
    write_report(report, tmp_path)
    figures = write_figures(report, tmp_path)
    assert set(figures) == set(FIGURES)
    for path in figures.values():
        assert path.read_bytes().startswith(PNG_SIGNATURE) and path.stat().st_size > 10_000
    page = write_html(report, tmp_path, figures).read_text()
    assert (tmp_path / PAGE_FILE).exists()
    for name in FIGURES.values():
        assert f'src="{name}"' in page
    assert f'href="{PAIRS_FILE}"' in page
    for check in report["checks"]:
        assert check["name"].replace(">", "&gt;").replace("<", "&lt;") in page
    assert "Simulation sampler" in page and "observer_knows_own_noise" in page
    assert f"on {2 * 8} of {8 * 7} pairs" in page


def test_report_figures_redraw_from_the_saved_document(tmp_path: Path) -> None:
    json_path, _ = write_report(sample_report(simulation=False), tmp_path)
    reloaded = json.loads(json_path.read_text())
    figures = write_figures(reloaded, tmp_path / "again")
    assert all(path.read_bytes().startswith(PNG_SIGNATURE) for path in figures.values())
    page = write_html(reloaded, tmp_path / "again", figures).read_text()
    assert "Simulation sampler" not in page
