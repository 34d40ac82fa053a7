"""`netdp reproduce`'s frame: the result document, the table and the figures a reproduction returns, and refusals."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from pydantic import ValidationError

from coordinator_tools.cli import main
from coordinator_tools.reproduce import command, page
from coordinator_tools.reproduce.outcome import (
    DIFFERS,
    FINDING,
    REPRODUCED,
    Context,
    Deviation,
    Outcome,
    Reproduction,
    Row,
    StatementVsProof,
    Verdict,
)
from coordinator_tools.reproduce.registry import MODULES, reproductions
from coordinator_tools.reproduce.result import ReproductionResult
from node.errors import ConfigError


def _toy_run(context: Context) -> Outcome:
    figure = Figure()
    figure.add_subplot().plot([1, 2], [context.seed, context.seed + 1])
    return Outcome(
        rows=[Row("a bound", published=2.0, measured=2.1, unit="eps", rtol=0.1, note="Table 1"),
              Row("a bound, missed", published=2.0, measured=3.0, unit="eps", rtol=0.1),
              Row("a trend", published=None, measured=1.0, note="decreasing in hop distance"),
              Row("a substitution", published=0.9, measured=0.7, unit="accuracy",
                  verdict=Verdict(DIFFERS, "another data set: 0.7 against 0.9."))],
        figures={"loss": figure}, runs=[Path("run"), Path("audit")], seeds={"noise": context.seed + 7},
        setup={"scale": context.scale}, summary="holds",
        deviations=[Deviation("dataset", "UCI Houses", "breast_cancer", "not bundled")],
        statement_vs_proof=[StatementVsProof("Thm 9", "2 eps", 1.0, "4 eps", 2.0, "proof", "the proof is safe")])


TOY = Reproduction(name="toy", paper="A paper", figure="Fig. 9", claim="it holds", run=_toy_run)


def test_the_result_puts_published_beside_measured_and_judges_each_row(tmp_path: Path) -> None:
    document = command.reproduce(TOY, tmp_path / "out", "quick", seed=5)
    assert [row["agrees"] for row in document["rows"]] == [True, False, None, None]
    # a match reproduces, an unexplained miss is a finding, a shape row is context, a stated verdict is kept
    assert [row["verdict"] for row in document["rows"]] == [REPRODUCED, FINDING, None, DIFFERS]
    assert "2.1" in document["rows"][0]["evidence"] and "3" in document["rows"][1]["evidence"]
    assert document["verdict"] == FINDING
    assert document["deviations"] == [{"aspect": "dataset", "paper": "UCI Houses", "netdp": "breast_cancer",
                                       "why": "not bundled"}]
    [case] = document["statement_vs_proof"]
    assert (case["statement_value"], case["proof_value"], case["used"]) == (1.0, 2.0, "proof")
    assert document["rows"][0]["ratio"] == pytest.approx(1.05)
    assert document["rows"][2]["ratio"] is None
    assert document["seeds"] == {"noise": 12} and document["seed"] == 5 and document["setup"] == {"scale": "quick"}
    assert json.loads((tmp_path / "out" / command.RESULT_FILE).read_text()) == document
    with (tmp_path / "out" / command.TABLE_FILE).open() as handle:
        table = list(csv.DictReader(handle))
    assert [row["measured"] for row in table] == ["2.1", "3.0", "1.0", "0.7"]
    assert (tmp_path / "out" / "loss.png").stat().st_size > 0 and document["figures"] == ["loss.png"]


def test_a_folder_with_files_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("a user's file")
    with pytest.raises(ConfigError, match="not empty"):
        command.reproduce(TOY, tmp_path, "quick", seed=1)
    assert [path.name for path in tmp_path.iterdir()] == ["kept.txt"]


def test_every_registered_reproduction_has_a_unique_name_and_both_scales_described() -> None:
    known = reproductions()
    assert len(known) == len(MODULES) >= 7
    for name, reproduction in known.items():
        assert name == reproduction.name and reproduction.full_scale and reproduction.quick_scale


def _holding_run(context: Context) -> Outcome:
    return Outcome(rows=[Row("a bound", published=2.0, measured=2.0, rtol=0.1)], runs=[Path("x/run"), Path("x/audit")],
                   deviations=[Deviation("n", "2048", "32", "seconds, not hours")])


def test_all_lists_every_reproduction_with_its_verdict_findings_first(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    holding = Reproduction(name="holds", paper="B paper", figure="Fig. 1", claim="it holds", run=_holding_run,
                           full_scale="f", quick_scale="q")
    monkeypatch.setattr(command, "reproductions", lambda: {"holds": holding, "toy": TOY})
    assert main(["reproduce", "--all", "--scale", "quick", "--seed", "3", "--out", str(tmp_path / "all")]) == 0
    summary = json.loads((tmp_path / "all" / command.SUMMARY_FILE).read_text())
    entries = {entry["name"]: entry for entry in summary["reproductions"]}
    assert list(entries) == ["holds", "toy"] and summary["stamp"]["commit"]
    tracked = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                             check=True, cwd=Path(command.__file__).parent).stdout.strip()
    assert summary["stamp"]["uncommitted_changes"] is bool(tracked)
    html = (tmp_path / "all" / "index.html").read_text()
    assert ("(with uncommitted changes to tracked files)" in html) is bool(tracked)
    assert entries["holds"]["verdict"] == REPRODUCED and entries["toy"]["verdict"] == FINDING
    assert entries["holds"]["deviations"][0]["netdp"] == "32"
    assert entries["holds"]["audits"] == ["holds/x/audit/index.html"]
    assert [row["verdict"] for row in entries["toy"]["verdicts"]] == [REPRODUCED, FINDING, DIFFERS]
    [finding] = entries["toy"]["findings"]
    assert finding["command"] == "netdp reproduce toy --scale quick --seed 3"
    assert "a bound, missed: netdp measures 3 where the paper has 2. " in finding["text"]
    assert finding["text"].endswith(entries["toy"]["verdicts"][1]["evidence"][1:])
    html = (tmp_path / "all" / page.PAGE_FILE).read_text()
    # the findings come before the sections; each section shows its verdict, deviations and statement vs proof
    assert html.index(finding["command"]) < html.index("id='holds'") < html.index("id='toy'")
    assert "breast_cancer" in html and "Thm 9" in html and "holds/x/audit/index.html" in html
    assert (tmp_path / "all" / "toy" / command.RESULT_FILE).exists()


def test_a_result_reads_back_into_its_model_and_another_shape_is_refused(tmp_path: Path) -> None:
    command.reproduce(TOY, tmp_path / "out", "quick", seed=5)
    result = ReproductionResult.read(tmp_path / "out" / command.RESULT_FILE)
    assert result.verdict == FINDING and result.rows[1].verdict == FINDING and result.rows[2].agrees is None
    assert result.deviations[0].netdp == "breast_cancer" and result.statement_vs_proof[0].used == "proof"
    assert command.ROW_FIELDS == ("quantity", "published", "measured", "unit", "ratio", "agrees", "rtol", "verdict",
                                  "evidence", "note")
    document = json.loads((tmp_path / "out" / command.RESULT_FILE).read_text())
    with pytest.raises(ValidationError, match="measured"):
        ReproductionResult.model_validate({**document, "rows": [{**document["rows"][0], "measured": "a lot"}]})
