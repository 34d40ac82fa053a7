"""`netdp reproduce decor-libsvm` at quick scale: every quantity recomputed from the runs it wrote."""

from __future__ import annotations

import json
import math
from pathlib import Path

import networkx as nx
import pytest

from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.plan import Target, summarize
from coordinator_tools.cli import main
from coordinator_tools.compare.learning_designs import LearningDesignSetup, baseline_accuracy
from coordinator_tools.compare.setup import CompareSetup
from coordinator_tools.reproduce.decor_libsvm import BATCH, CLIP, DATASET, LEARNING_RATE, QUICK, RATIO


def test_quick_scale_rows_are_the_runs_numbers(tmp_path: Path) -> None:
    out = tmp_path / "decor"
    assert main(["reproduce", "decor-libsvm", "--scale", "quick", "--out", str(out), "--seed", "2"]) == 0
    result = json.loads((out / "result.json").read_text())
    rows = {row["quantity"]: row for row in result["rows"]}
    assert all(math.isfinite(row["measured"]) for row in result["rows"]) and result["deviations"]
    learning = CompareSetup(graph="ring", n=QUICK.n, dataset=DATASET, steps_per_node=QUICK.steps, clip=CLIP,
                            batch=BATCH, gossip_learning_rate=LEARNING_RATE)
    for eps in QUICK.eps:
        sigmas = result["setup"][f"eps {eps:g}"]
        ratio = rows[f"eps {eps:g}: sigma_ldp / sigma_cdp"]
        assert ratio["published"] == pytest.approx(math.sqrt(QUICK.n)) and ratio["agrees"] is True
        audit = out / f"decor-eps-{eps:g}" / "audit"
        worst = summarize(pair_matrix(read_pairs(audit, ["source", "observer", "exact_eps_upper"]), "exact_eps_upper",
                                      QUICK.n), "worst")
        assert rows[f"eps {eps:g}: DECOR's audited worst-pair eps (curious user)"]["measured"] == worst
        assert worst == pytest.approx(eps, rel=1e-3) and worst <= eps
        report = json.loads((audit / "report.json").read_text())
        assert report["protocol"] == "decor-gd" and report["learning"]["sigma_cor_ratio"] == RATIO
        assert report["sigma"] == sigmas["sigma_decor"]
        decor = rows[f"eps {eps:g}: DECOR accuracy"]["measured"]
        assert decor == report["utility"]["netdp"][-1]
        share = (sigmas["sigma_decor"] - sigmas["sigma_cdp"]) / (sigmas["sigma_ldp"] - sigmas["sigma_cdp"])
        assert rows[f"eps {eps:g}: DECOR's sigma between sigma_cdp and sigma_ldp"]["measured"] == share
        assert 0.0 < share < 1.0  # DECOR's proven noise lies between central DP's and local DP's
        setup = LearningDesignSetup(graph=nx.cycle_graph(QUICK.n), graph_name="ring", target=Target(eps, "worst"),
                                    dimension=learning.dimension, sensitivity=learning.sensitivity,
                                    learning=learning, decor_ratio=RATIO)
        for name, key in (("LDP", "sigma_ldp"), ("CDP", "sigma_cdp")):
            measured = rows[f"eps {eps:g}: {name} accuracy"]["measured"]
            assert measured == baseline_accuracy(setup, sigmas[key], out / "data")
        assert rows[f"eps {eps:g}: DECOR accuracy minus LDP's"]["measured"] == pytest.approx(
            decor - rows[f"eps {eps:g}: LDP accuracy"]["measured"], abs=1e-15)
