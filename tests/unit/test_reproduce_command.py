"""`netdp reproduce`'s frame: the result document, the table and the figures a reproduction returns, and refusals."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from coordinator_tools.reproduce import command
from coordinator_tools.reproduce.outcome import Context, Outcome, Reproduction, Row
from coordinator_tools.reproduce.registry import MODULES, reproductions
from node.errors import ConfigError


def _toy_run(context: Context) -> Outcome:
    figure = Figure()
    figure.add_subplot().plot([1, 2], [context.seed, context.seed + 1])
    return Outcome(
        rows=[Row("a bound", published=2.0, measured=2.1, unit="eps", rtol=0.1, note="Table 1"),
              Row("a bound, missed", published=2.0, measured=3.0, unit="eps", rtol=0.1),
              Row("a trend", published=None, measured=1.0, note="decreasing in hop distance")],
        figures={"loss": figure}, runs=[Path("run")], seeds={"noise": context.seed + 7},
        setup={"scale": context.scale}, summary="holds")


TOY = Reproduction(name="toy", paper="A paper", figure="Fig. 9", claim="it holds", run=_toy_run)


def test_the_result_puts_published_beside_measured_and_judges_each_row(tmp_path: Path) -> None:
    document = command.reproduce(TOY, tmp_path / "out", "quick", seed=5)
    assert [row["agrees"] for row in document["rows"]] == [True, False, None]
    assert document["rows"][0]["ratio"] == pytest.approx(1.05)
    assert document["rows"][2]["ratio"] is None
    assert document["seeds"] == {"noise": 12} and document["seed"] == 5 and document["setup"] == {"scale": "quick"}
    assert json.loads((tmp_path / "out" / command.RESULT_FILE).read_text()) == document
    with (tmp_path / "out" / command.TABLE_FILE).open() as handle:
        table = list(csv.DictReader(handle))
    assert [row["measured"] for row in table] == ["2.1", "3.0", "1.0"]
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
