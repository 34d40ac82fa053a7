"""`netdp compare --designs secure-neighbourhood --task learning`: secure-neighbourhood-gd calibrated, run, audited."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from coordinator_tools.cli import main
from coordinator_tools.compare import designs
from tests.unit.test_compare_designs import TARGET


def test_secure_neighbourhood_learns_at_the_target_and_an_eavesdropper_is_audited(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert main(["compare", "--designs", "secure-neighbourhood,muffliato", "--task", "learning", "--graph", "ring",
                 "--n", "4", "--steps-per-node", "3", "--virtual", "--sampler", "simulation", "--seed", "5",
                 "--data-seed", "1", "--out", str(out)]) == 0
    with (out / designs.CSV_FILE).open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["design"], r["threat_model"]) for r in rows] == [
        ("secure-neighbourhood", "curious-observer"), ("secure-neighbourhood", "eavesdropper"),
        ("muffliato", "curious-observer")]
    assert {r["utility_kind"] for r in rows} == {"accuracy"} and all(0.0 < float(r["utility"]) <= 1.0 for r in rows)
    secure, heard, muffliato = rows
    assert float(secure["mean_eps"]) == pytest.approx(TARGET, rel=2e-3)
    # With every mask given to the observer the bound is Muffliato-GD's: the same calibration, the same ε.
    assert float(secure["mean_eps"]) == pytest.approx(float(muffliato["mean_eps"]), rel=1e-6)
    assert float(heard["worst_eps"]) >= float(secure["worst_eps"]) * (1 - 1e-9)  # every step of every node on the wire
