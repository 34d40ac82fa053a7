"""`netdp reproduce aistats2018-fig2` at quick scale: every row present, finite and consistent."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coordinator_tools.cli import main


def test_fig2_quick_spends_each_budget_and_scores_every_run(tmp_path: Path) -> None:
    out = tmp_path / "fig2"
    assert main(["reproduce", "aistats2018-fig2", "--scale", "quick", "--out", str(out), "--seed", "4"]) == 0
    result = json.loads((out / "result.json").read_text())
    rows = {row["quantity"]: row for row in result["rows"]}
    assert all(math.isfinite(row["measured"]) for row in result["rows"])
    assert rows["agents"]["published"] == 100 and rows["agents"]["measured"] == 20  # §5.1's n; quick runs 20
    assert rows["delta of every agent's budget"]["published"] == pytest.approx(math.exp(-5), rel=1e-15)
    assert rows["delta of every agent's budget"]["agrees"] is True
    budgets = result["setup"]["budgets"]
    assert budgets == [1.0, 5.0]
    for budget in budgets:
        theorem1 = rows[f"budget {budget:g}: largest spend by Thm 1 over agents"]
        pld = rows[f"budget {budget:g}: largest spend by the PLD accountant over agents"]
        assert theorem1["published"] == budget and theorem1["agrees"] is True
        assert 0.0 < pld["measured"] < theorem1["measured"]  # the exact composition is below Thm 1's bound
        assert 0.0 <= rows[f"budget {budget:g}: private CD mean test accuracy (netdp run)"]["measured"] <= 1.0
        report = json.loads((out / f"eps{budget:g}" / "audit" / "report.json").read_text())
        assert report["utility"]["private"] == rows[f"budget {budget:g}: private CD mean test accuracy (netdp run)"][
            "measured"]
    non_private = json.loads((out / "non-private" / "audit" / "report.json").read_text())
    assert non_private["utility"]["private"] is None
    assert rows["non-private CD: mean test accuracy (netdp run)"]["measured"] == non_private["utility"]["run"]
    assert -1.0 <= rows["accuracy against budget"]["measured"] <= 1.0
    assert 0.0 <= rows["budgets where non-private CD is at least as accurate as private CD (fraction)"][
        "measured"] <= 1.0
    assert set(result["seeds"]) == {"task", "eps1_noise", "eps5_noise", "non_private_noise"}
    assert len(result["runs"]) == 6 and len(result["figures"]) == 2
