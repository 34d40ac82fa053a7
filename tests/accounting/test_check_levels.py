"""Checks say what they found: a warning is carried as one (not as True), a check with nothing to check is
"not applicable" (not "all 0 pairs"), and a closed form of 0 below a positive loss undercounts by an
unbounded factor, said in words (never "infx")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console

from coordinator_tools.api import Audit
from coordinator_tools.audit.checks import UNDERCOUNT_CHECK, loss_checks, reconstructable_is_ldp
from coordinator_tools.audit.command import print_summary
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.report import build_report
from tests.accounting.simulated_run import fake_losses, ring_topology


def test_a_check_with_no_pair_to_check_is_not_applicable_rather_than_all_zero() -> None:
    losses = fake_losses(ring_topology(n=6))
    losses.reconstructable = np.zeros_like(losses.reconstructable)
    check = reconstructable_is_ldp(losses)
    assert (check.level, check.detail) == ("pass", "not applicable (no reconstructable pairs)")
    assert "all 0" not in " ".join(c.detail for c in loss_checks(losses))


def test_a_zero_bound_below_a_positive_loss_undercounts_by_an_unbounded_factor_in_words() -> None:
    losses = fake_losses(ring_topology(n=6))
    losses.paper_rdp[0, 1] = losses.paper_eps[0, 1] = 0.0
    check = next(c for c in loss_checks(losses) if c.name == UNDERCOUNT_CHECK)
    assert check.level == "warning"
    assert ("undercounts 12 of 30 pairs (by an unbounded factor: the bound is 0 where the exact loss is not)"
            in check.detail)
    assert "inf" not in check.detail


def test_the_api_and_the_console_carry_a_warning_as_a_warning(tmp_path: Path) -> None:
    topology = ring_topology(n=6)
    losses = fake_losses(topology)
    losses.paper_rdp[0, 1] = losses.paper_eps[0, 1] = 0.0
    built = build_report(losses, planned_transcript(topology), checks=loss_checks(losses))
    checks = Audit(tmp_path / "report.json", built.document).checks
    undercount = checks.set_index("name").loc[UNDERCOUNT_CHECK]
    assert (undercount["level"], bool(undercount["ok"])) == ("warning", True)
    assert list(checks.columns) == ["name", "level", "ok", "detail"]
    console = Console(record=True, width=400)
    print_summary(built, tmp_path / "index.html", console)
    shown = console.export_text()
    assert (f"⚠ warning {UNDERCOUNT_CHECK}: the paper's bound undercounts 12 of 30 pairs (by an unbounded factor"
            in shown)
    assert "infx" not in shown and "inf×" not in shown
