"""`netdp compare` end to end: both protocols calibrated, run on 8 real node processes each, audited, compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_tools.cli import main

pytestmark = pytest.mark.cluster
TARGET = 1.0


def test_compare_writes_consistent_comparison(tmp_path: Path) -> None:
    out = tmp_path / "compare"
    code = main(["compare", "--n", "8", "--steps-per-node", "2", "--target-mean-eps", str(TARGET), "--data-seed", "3",
                 "--insecure", "--sampler", "simulation", "--seed", "5", "--out", str(out)])
    assert code == 0
    document = json.loads((out / "comparison.json").read_text())
    assert (document["graph"], document["n"], document["dataset"]) == ("hypercube", 8, "breast_cancer")
    assert document["target"] == {**document["target"], "mean_eps": TARGET, "delta": 1e-5}
    for name, entry in document["protocols"].items():
        assert entry["planned_mean_eps"] == pytest.approx(TARGET, rel=0.05), name
        assert entry["sigma"] > 0 and entry["calibration"]["plan_evaluations"] >= 1
        for accuracy in entry["accuracy"].values():
            assert 0.0 <= accuracy <= 1.0
        for per_hop in entry["mean_eps_per_hop"].values():  # 0 where u's gradients never reach v in time
            assert per_hop["1"] > 0 and all(value >= 0 for value in per_hop.values())
        assert Path(entry["audit"], "report.json").exists()
    gossip, walk = document["protocols"]["muffliato-gd"], document["protocols"]["rw-sgd"]
    # The audit's columns are the planned ones: gossip's exact on the fixed schedule, the walk's ex ante on the
    # same simulated walks.
    assert gossip["realized_mean_eps"]["exact"] == pytest.approx(gossip["planned_mean_eps"], rel=1e-6)
    assert walk["realized_mean_eps"]["ex_ante"] == pytest.approx(walk["planned_mean_eps"], rel=1e-6)
    assert set(walk["realized_mean_eps"]) == {"ex_ante", "realized_path"}
    assert document["setup"]["walk_steps"] == 8 * document["setup"]["steps_per_node"]
    assert (out / "loss_vs_hops.png").stat().st_size > 0 and (out / "accuracy.png").stat().st_size > 0
