"""`netdp sweep` end to end through the CLI: virtual sweeps run in this process, and one networked point.

Each point's numbers are checked against its own folder: the audit report's pairs, the data and
the nodes' estimates. The networked test starts real node processes (marked `cluster`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.cli import main
from coordinator_tools.sweep import command

SEED_COLUMNS = ("graph_seed", "data_seed", "noise_seed", "attack_seed")


def read_csv(out: Path) -> list[dict[str, str]]:
    with open(out / "sweep.csv", newline="") as stream:
        return list(csv.DictReader(stream))


def estimates(folder: Path, n: int) -> np.ndarray:
    return np.array([json.loads((folder / "run" / f"node-{v}" / "estimate.json").read_text())["value"]
                     for v in range(n)])


def mse(folder: Path, n: int) -> float:
    """The run's MSE per coordinate to the mean of the inputs, from the point's data folder and estimates."""
    inputs = np.array([json.loads((folder / "data" / f"node-{v}.json").read_text())["value"] for v in range(n)])
    return float(np.mean((estimates(folder, n) - inputs.mean(axis=0)) ** 2))


def mean_rule(report: dict, column: str = "exact") -> float:
    """Muffliato's mean ε, max_v (1/n) Σ_u ε(u → v), from the report's list of pairs."""
    n = report["run"]["n"]
    eps = np.zeros((n, n))
    for pair in report["pairs"]:
        eps[pair["source"], pair["observer"]] = pair[column]["eps_upper" if column == "exact" else "eps"]
    return float(np.max(eps.sum(axis=0) / n))


class CountingRuns:
    """The real run_point, counting the points it runs."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.real = command.run_point

    def __call__(self, point, grid, folder):
        self.calls.append(point.id)
        return self.real(point, grid, folder)


def test_a_three_point_sweep_matches_each_point_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "sweep"
    argv = ["sweep", "--out", str(out), "--protocol", "muffliato", "--graph", "hypercube", "--n", "8",
            "--sigma", "0.5,1,2", "--rounds", "2", "--dimension", "3", "--seed", "7"]
    runs = CountingRuns()
    monkeypatch.setattr(command, "run_point", runs)
    assert main(argv) == 0
    rows = read_csv(out)
    document = json.loads((out / "sweep.json").read_text())
    assert len(rows) == 3 == len(runs.calls) and [row["sigma"] for row in rows] == ["0.5", "1.0", "2.0"]
    for row, entry in zip(rows, document["points"]):
        assert (row["point"], entry["status"]) == (entry["id"], "done")
        assert [row[column] for column in SEED_COLUMNS] == ["" if entry[c] is None else str(entry[c])
                                                            for c in SEED_COLUMNS]
        folder = out / entry["folder"]
        report = json.loads((folder / "audit" / "report.json").read_text())
        assert float(row["mean_exact_eps"]) == pytest.approx(mean_rule(report), rel=1e-12)
        assert float(row["mean_paper_eps"]) == pytest.approx(mean_rule(report, "paper"), rel=1e-12)
        assert float(row["worst_exact_eps"]) == report["summary"]["pair_columns"]["exact_eps_upper"]["max"]
        assert float(row["ldp_eps"]) == report["baselines"]["ldp"]["eps"] >= float(row["mean_exact_eps"])
        assert float(row["central_eps"]) == report["baselines"]["central"]["eps"]
        assert float(row["mean_exact_rdp"]) == report["summary"]["max_mean_rdp"]["exact_upper"]["rdp"]
        assert row["utility_metric"] == "mse" and row["checks_ok"] == "true" and row["T"] == "2"
        assert float(row["utility"]) == pytest.approx(mse(folder, 8), rel=1e-12)
        # The baselines' release is the mean of the noisy inputs: below the run's error after only 2 rounds.
        assert 0 < float(row["baseline_utility"]) < float(row["utility"])
    mean_eps = [float(row["mean_exact_eps"]) for row in rows]
    assert mean_eps[0] > mean_eps[1] > mean_eps[2] > 0
    assert (out / "utility_vs_mean_eps.png").stat().st_size > 0 and (out / "utility_vs_worst_eps.png").stat().st_size

    row_files = sorted((out / "points").glob("*/row.json"))
    written = {path: path.stat().st_mtime_ns for path in row_files}
    assert main(argv) == 0
    assert len(runs.calls) == 3  # nothing ran again
    assert {path: path.stat().st_mtime_ns for path in row_files} == written and read_csv(out) == rows

    again = out / document["points"][1]["folder"]
    before = estimates(again, 8)
    (again / "row.json").unlink()
    assert main(argv) == 0
    assert runs.calls[3:] == [document["points"][1]["id"]]  # only that point
    # The same recorded seeds draw the same noise (sums may add up in another order).
    assert np.allclose(estimates(again, 8), before, rtol=1e-12, atol=1e-15)
    assert [row["mean_exact_eps"] for row in read_csv(out)] == [row["mean_exact_eps"] for row in rows]


def test_a_target_eps_point_meets_its_target_within_the_calibration_tolerance(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--out", str(out), "--protocol", "muffliato", "--n", "8", "--target-eps", "2",
                 "--rounds", "3"]) == 0
    (row,) = read_csv(out)
    assert float(row["target_eps"]) == 2.0 and float(row["sigma"]) > 0
    # The planner's sigma is the smallest to a relative 1e-6: the realized mean eps is the planned one, just below.
    assert 2.0 * (1 - 1e-4) <= float(row["mean_exact_eps"]) <= 2.0
    topology = json.loads((out / "points" / row["point"] / "topology.json").read_text())
    assert topology["protocol"]["sigma"] == float(row["sigma"])


def test_a_learning_point_reports_test_accuracy_against_the_trusted_aggregator(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--out", str(out), "--protocol", "muffliato-gd", "--n", "8", "--sigma", "1",
                 "--steps", "2"]) == 0
    (row,) = read_csv(out)
    report = json.loads((out / "points" / row["point"] / "audit" / "report.json").read_text())
    assert row["utility_metric"] == "accuracy" and row["T"] == "2"
    assert float(row["utility"]) == report["utility"]["netdp"][-1] and 0 <= float(row["utility"]) <= 1
    assert float(row["baseline_utility"]) == report["utility"]["central"][-1]
    assert float(row["ldp_eps"]) >= float(row["mean_exact_eps"]) > 0


@pytest.mark.cluster
def test_a_networked_point_runs_real_nodes_over_mutual_tls(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--out", str(out), "--protocol", "muffliato", "--n", "4", "--sigma", "1", "--rounds", "2",
                 "--networked"]) == 0
    (row,) = read_csv(out)
    folder = out / "points" / row["point"]
    assert (row["mode"], row["checks_ok"]) == ("networked", "true")
    assert json.loads((folder / "run" / "run.json").read_text())["tls"] is True
    assert float(row["utility"]) == pytest.approx(mse(folder, 4), rel=1e-12)
