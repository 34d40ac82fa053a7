"""The recommendation task end to end from the command line, on the shipped synthetic ratings.

`netdp data recommendation --synthetic` makes the task (40 users, p = 4 ALS features, 10-NN graph),
`netdp topology import` publishes it for personalized CD with least squares (or the registered
recommendation task, the same model) and the printed
smoothness bound, `netdp run --virtual` runs the 40 agents in process (private, ε̄ = 5, 10 updates
each) and `netdp audit --data` reports the per-user test RMSE: non-private CD and the private run
below purely local models, as in the paper's Table 1. The baselines are seeded: the same numbers
every time for the same split seed.
"""

from __future__ import annotations

import json
import math

import pytest

from coordinator_tools.cli import main
from coordinator_tools.dataprep.personalized_task import INFO_FILE
from coordinator_tools.dataprep.recommendation_task import RecommendationInfo
from node.schema import load_model

UPDATES, EPSILON = 10, 5.0
# Measured once (split seed 0, baseline seed 0): the report must give these again.
LOCAL_RMSE, NON_PRIVATE_RMSE = 1.0611, 0.9667


@pytest.fixture(scope="module", params=["least_squares", "recommendation"])
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The audit of the run, with the least-squares task or the registered recommendation task (the same model
    read by per-user RMSE): the same numbers either way."""
    root = tmp_path_factory.mktemp("recommendation")
    assert main(["data", "recommendation", "--synthetic", "--seed", "0", "--out", str(root / "task")]) == 0
    info = load_model(RecommendationInfo, root / "task" / INFO_FILE)
    assert main(["topology", "import", str(root / "task" / "similarity.edges"), "--protocol", "personalized-cd",
                 "--task", request.param, "--dimension", str(info.features), "--smoothness", repr(info.smoothness),
                 "--max-examples", str(max(info.train_sizes)), "--mu", "0.3", "--lipschitz", "1",
                 "--updates", str(UPDATES), "--epsilon", str(EPSILON), "--delta", repr(math.exp(-5)),
                 "--tick-rate", "100", "--out", str(root / "topology.json")]) == 0
    assert main(["run", str(root / "topology.json"), "--data", str(root / "task"), "--out", str(root / "run"),
                 "--virtual", "--sampler", "simulation", "--seed", "7"]) == 0
    assert main(["audit", str(root / "run"), "--out", str(root / "audit"), "--data", str(root / "task")]) == 0
    return json.loads((root / "audit" / "report.json").read_text(encoding="utf-8"))


def test_the_audit_reports_per_user_rmse_with_cd_below_purely_local_models(report: dict) -> None:
    utility = report["utility"]
    assert utility["metric"] == "rmse" and utility["agents_scored"] == list(range(40))
    assert utility["local"] == pytest.approx(LOCAL_RMSE, abs=1e-4)
    assert utility["non_private"] == pytest.approx(NON_PRIVATE_RMSE, abs=1e-4)
    assert utility["non_private"] < utility["private"] < utility["local"] - 0.03
    curve = utility["budget_curve"]
    assert curve["private"][-1] < utility["local"]  # at eps 20 private CD is close to non-private CD
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    assert [agent["updates"] for agent in report["personalized"]["agents"]] == [UPDATES] * 40
