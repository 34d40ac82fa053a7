"""`netdp sweep`'s folder: resume (finished points are not rerun), refusal of another grid, sweep.json and the CSV.

The points here are not run: `run_point` is replaced by a stub that records its calls and
returns a row, so that only the bookkeeping is under test (the real runs: tests/cluster/test_sweep.py).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from pydantic import ValidationError

from coordinator_tools.sweep import command, figures
from coordinator_tools.sweep.grid import Point, SweepGrid, expand, grid_from
from coordinator_tools.sweep.rows import COLUMNS, SweepDocument, SweepRow
from coordinator_tools.sweep.state import (
    CSV_FILE,
    ROW_FILE,
    SWEEP_FILE,
    check_folder,
    point_folder,
    read_row,
    write_csv,
    write_row,
)
from node.errors import ConfigError, NetdpError

GRID = grid_from({"protocol": "muffliato", "n": 8, "sigma": [0.5, 1, 2], "rounds": 2}, "test")


class StubRuns:
    """run_point's stand-in: writes a file into the point's folder and returns a row; can fail on request."""

    def __init__(self, failing: str | None = None) -> None:
        self.calls: list[str] = []
        self.failing = failing

    def __call__(self, point: Point, grid: SweepGrid, folder: Path) -> dict[str, object]:
        self.calls.append(point.id)
        assert not folder.exists(), "a point runs from an empty folder"
        if point.id == self.failing:
            folder.mkdir(parents=True)  # what an interrupted run leaves
            raise NetdpError("2 node(s) failed")
        folder.mkdir(parents=True)
        (folder / "ran").write_text("1")
        sigma = float(point.sigma)
        return {"point": point.id, "protocol": point.protocol, "graph": point.graph, "n": point.n, "T": point.length,
                "sigma": sigma, "target_eps": None, "delta": grid.delta, "mode": "virtual",
                "graph_seed": point.graph_seed, "data_seed": point.data_seed, "noise_seed": point.noise_seed,
                "attack_seed": point.attack_seed, "utility_metric": "mse", "utility": sigma**2 / 4,
                "baseline_utility": sigma**2 / 8, "mean_exact_eps": 3 / sigma, "worst_exact_eps": 4 / sigma,
                "mean_paper_eps": 3 / sigma, "ldp_eps": 5 / sigma, "central_eps": 1 / sigma, "mean_exact_rdp": 1.0,
                "alpha": 2.0, "elapsed_s": 0.1, "checks_ok": True}


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> StubRuns:
    runs = StubRuns()
    monkeypatch.setattr(command, "run_point", runs)
    return runs


def test_a_rerun_skips_finished_points_and_reruns_one_whose_row_file_is_gone(tmp_path: Path, stub: StubRuns) -> None:
    out = tmp_path / "sweep"
    ids = [point.id for point in expand(GRID)]
    assert command.run_sweep(GRID, out) == (3, 0, {})
    assert stub.calls == ids
    assert command.run_sweep(GRID, out) == (0, 3, {})
    assert stub.calls == ids  # nothing ran again
    (point_folder(out, ids[1]) / ROW_FILE).unlink()  # the point looks interrupted: its folder is left, no row
    assert command.run_sweep(GRID, out) == (1, 2, {})
    assert stub.calls == [*ids, ids[1]]
    with open(out / CSV_FILE, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [row["point"] for row in rows] == ids and list(rows[0]) == list(COLUMNS)
    assert rows[0]["target_eps"] == "" and rows[0]["checks_ok"] == "true" and float(rows[2]["sigma"]) == 2.0
    assert (out / "utility_vs_mean_eps.png").stat().st_size > 0 and (out / "utility_vs_worst_eps.png").exists()


def test_a_failed_point_is_recorded_left_out_of_the_csv_and_retried(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "sweep"
    ids = [point.id for point in expand(GRID)]
    runs = StubRuns(failing=ids[0])
    monkeypatch.setattr(command, "run_point", runs)
    ran, reused, failures = command.run_sweep(GRID, out)
    assert (ran, reused, failures) == (3, 0, {ids[0]: "2 node(s) failed"})
    document = json.loads((out / SWEEP_FILE).read_text())
    assert [(entry["id"], entry["status"]) for entry in document["points"]] == [
        (ids[0], "failed"), (ids[1], "done"), (ids[2], "done")]
    assert document["points"][0]["error"] == "2 node(s) failed"
    assert document["grid"] == GRID.model_dump(mode="json")
    assert document["points"][1]["noise_seed"] == expand(GRID)[1].noise_seed
    assert [row["point"] for row in csv.DictReader((out / CSV_FILE).read_text().splitlines())] == ids[1:]
    runs.failing = None
    assert command.run_sweep(GRID, out) == (1, 2, {})  # the failed point's leftovers were cleared first
    assert runs.calls == [*ids, ids[0]]
    assert {entry["status"] for entry in json.loads((out / SWEEP_FILE).read_text())["points"]} == {"done"}


def test_a_folder_of_another_grid_or_of_something_else_is_refused(tmp_path: Path, stub: StubRuns) -> None:
    out = tmp_path / "sweep"
    command.run_sweep(GRID, out)
    other = grid_from({"protocol": "muffliato", "n": 8, "sigma": [0.5, 1], "rounds": 3}, "test")
    with pytest.raises(ConfigError, match=r"holds a sweep of another grid \(it differs in rounds, sigma\)"):
        command.run_sweep(other, out)
    assert len(stub.calls) == 3
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not empty and holds no sweep.json"):
        check_folder(busy, GRID)
    check_folder(tmp_path / "new", GRID)  # a new folder is fine


def test_a_bad_point_is_refused_before_any_point_runs(tmp_path: Path, stub: StubRuns) -> None:
    grid = grid_from({"protocol": "muffliato", "graph": ["ring", "hypercube"], "n": [8, 12], "sigma": 1,
                      "rounds": 2}, "test")
    with pytest.raises(ConfigError, match="graph hypercube with n = 12: hypercube needs n a power of 2"):
        command.run_sweep(grid, tmp_path / "sweep")
    assert stub.calls == [] and not (tmp_path / "sweep").exists()


def test_csv_cells(tmp_path: Path) -> None:
    path = write_csv(tmp_path, [{"a": None, "b": False, "c": 0.1}], ["a", "b", "c"])
    assert path.read_text() == "a,b,c\n,false,0.1\n"


def test_a_grid_of_both_metrics_draws_one_panel_each(tmp_path: Path) -> None:
    points = expand(grid_from({"protocol": ["muffliato", "muffliato-gd"], "n": 8, "sigma": [1, 2], "rounds": 2},
                              "test"))
    rows = [{**StubRuns()(point, GRID, tmp_path / point.id), "T": point.length,
             "utility_metric": "accuracy" if point.learning else "mse"} for point in points]
    written = figures.utility_figures(rows, tmp_path)
    assert [path.name for path in written] == [figures.MEAN_FIGURE, figures.WORST_FIGURE]
    assert all(plt.imread(path).shape[1] == 2 * 7 * 120 for path in written)  # two 7-inch panels at 120 dpi
    assert figures.utility_figures([], tmp_path) == []


def test_rows_and_sweep_json_are_checked_against_their_models(tmp_path: Path, stub: StubRuns) -> None:
    out = tmp_path / "sweep"
    command.run_sweep(GRID, out)
    point = expand(GRID)[0]
    row = read_row(out, point.id)
    assert isinstance(row, SweepRow) and row.point == point.id and row.sigma == 0.5 and row.checks_ok is True
    document = SweepDocument.model_validate_json((out / SWEEP_FILE).read_text())
    assert document.grid == GRID and [entry.status for entry in document.points] == ["done"] * 3
    assert "error" not in json.loads((out / SWEEP_FILE).read_text())["points"][0]
    broken = {**stub(expand(GRID)[1], GRID, tmp_path / "other"), "checks_ok": "maybe"}
    broken.pop("alpha")
    with pytest.raises(ValidationError, match="alpha"):
        write_row(out, "x", broken)
    assert read_row(out, "x") is None
