"""`netdp compare --designs` on real node processes (mutual TLS): every design at the same target, audited.

Starts real node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from coordinator_tools.cli import main

pytestmark = pytest.mark.cluster
TARGET = 1.0


def test_designs_on_node_processes_meet_the_target_and_decor_averages_near_central(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert main(["compare", "--designs", "muffliato,decor,ldp,central", "--n", "8", "--target-eps", str(TARGET),
                 "--data-seed", "2", "--out", str(out)]) == 0
    rows = {(r["design"], r["threat_model"]): r for r in csv.DictReader((out / "designs.csv").open())}
    assert sorted(rows) == sorted([("muffliato", "curious-observer"), ("decor", "curious-observer"),
                                   ("decor", "eavesdropper"), *((baseline, model) for baseline in ("ldp", "central")
                                                                for model in ("curious-observer", "eavesdropper"))])
    for design in ("muffliato", "decor", "ldp", "central"):
        assert float(rows[design, "curious-observer"]["mean_eps"]) == pytest.approx(TARGET, rel=2e-3), design
    utility = {key: float(r["utility"]) for key, r in rows.items()}
    central = utility["central", "curious-observer"]
    assert utility["ldp", "curious-observer"] / central == pytest.approx(8, rel=1e-3)
    # one draw of the mean's noise, 256 coordinates: n/(n − 1) = 1.14 expected, ±9%
    assert utility["decor", "curious-observer"] / central < 2
    for design in ("muffliato", "decor"):
        assert (out / design / "certs").is_dir() and (out / design / "audit" / "report.json").exists()
