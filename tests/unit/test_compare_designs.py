"""`netdp compare --designs`: every design at the same target, designs.csv's columns, and the one-line refusals."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest

from coordinator_tools.audit.plan import PlanOptions, Target, summarize
from coordinator_tools.audit.protocols import auditor_named
from coordinator_tools.cli import main
from coordinator_tools.cluster.demo_protocols import DECOR
from coordinator_tools.compare import designs
from coordinator_tools.compare.designs import (
    COLUMNS,
    DesignSetup,
    baseline_rows,
    calibrated,
    chosen_designs,
    mixing_rounds,
)
from coordinator_tools.topology.generators import generate
from node.errors import ConfigError
from node.protocols.decor import DecorParams
from node.protocols.secure_neighbourhood import SecureNeighbourhoodParams

TARGET = 1.0


def setup(rule: str = "mean") -> DesignSetup:
    return DesignSetup(graph=generate("hypercube", n=8), graph_name="hypercube",
                       target=Target(TARGET, rule), dimension=4)  # type: ignore[arg-type]


@pytest.mark.parametrize("rule", ["mean", "worst"])
def test_the_baselines_meet_the_target_and_central_is_n_times_better(rule: str) -> None:
    rows = {r["design"]: r for design in ("ldp", "central") for r in baseline_rows(setup(rule), design, ["x"])}
    for r in rows.values():
        assert float(r[f"{rule}_eps"]) == pytest.approx(TARGET, rel=1e-3)  # type: ignore[arg-type]
        assert float(r[f"{rule}_eps"]) <= TARGET * (1 + 1e-9)  # type: ignore[arg-type]
    # the same ε per pair, so local DP's σ² is n times central's per-node σ²: MSE n times larger
    assert float(rows["ldp"]["utility"]) / float(rows["central"]["utility"]) == pytest.approx(8, rel=1e-3)  # type: ignore[arg-type]


@pytest.mark.parametrize("design", ["muffliato", "decor", "zero-sum", "secure-neighbourhood"])
@pytest.mark.parametrize("rule", ["mean", "worst"])
def test_a_protocol_design_is_calibrated_to_the_same_target(design: str, rule: str) -> None:
    shared = setup(rule)
    params = calibrated(shared, design)
    topology = shared.topology(params, run_id="check")
    losses = auditor_named(design).plan(topology, PlanOptions(delta=shared.delta)).losses
    assert summarize(losses.exact_eps_upper, rule) == pytest.approx(TARGET, rel=1e-3)  # type: ignore[arg-type]


def test_decor_averages_with_noise_in_round_zero_and_mixes_its_pairwise_terms_out() -> None:
    params = setup().params("decor", 1.0)
    assert isinstance(params, DecorParams) and params.noisy_rounds == 1
    # 3-cube, Metropolis: |λ| = 1/2 beside 1; 3 · 30² · 4^-T ≤ 0.01 / 8 needs 4^T ≥ 2.16e6: T = 11
    assert params.rounds == 1 + 11


def test_secure_neighbourhood_draws_every_round_for_the_graphs_diameter() -> None:
    params = setup().params("secure-neighbourhood", 1.0)
    assert isinstance(params, SecureNeighbourhoodParams) and (params.rounds, params.mask_ratio) == (3, 10.0)


def test_unknown_designs_are_refused_in_one_line_and_repeats_dropped() -> None:
    with pytest.raises(ConfigError, match="nosuch is no design"):
        chosen_designs(["nosuch"])
    assert chosen_designs(["decor", "muffliato", "ldp"]) == ("decor", "muffliato", "ldp")
    assert chosen_designs(["decor", "central", "decor"]) == ("decor", "central")


def test_compare_designs_writes_one_row_per_design_and_threat_model(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert main(["compare", "--designs", "decor,central", "--graph", "ring", "--n", "4", "--dimension", "8",
                 "--virtual", "--sampler", "simulation", "--seed", "5", "--data-seed", "1", "--out", str(out)]) == 0
    with (out / designs.CSV_FILE).open() as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == COLUMNS
        rows = list(reader)
    assert [(r["design"], r["threat_model"]) for r in rows] == [
        ("decor", "curious-observer"), ("decor", "eavesdropper"),
        ("central", "curious-observer"), ("central", "eavesdropper")]
    assert {r["utility_kind"] for r in rows} == {"mse"}
    decor = rows[0]
    assert float(decor["mean_eps"]) == pytest.approx(TARGET, rel=1e-3)
    assert float(rows[1]["mean_eps"]) <= float(decor["mean_eps"])  # an outsider holds no secret
    assert 0 < float(decor["utility"]) < 10 * float(rows[2]["utility"])
    assert (out / "designs.png").stat().st_size > 0 and (out / designs.JSON_FILE).exists()



def test_compare_designs_learning_rows_are_accuracies_at_the_target(tmp_path: Path) -> None:
    """--task learning: decor-gd and muffliato-gd calibrated, run and audited; the baselines' ε over the T steps."""
    out = tmp_path / "c"
    assert main(["compare", "--designs", "decor,muffliato,ldp", "--task", "learning", "--graph", "ring", "--n", "4",
                 "--steps-per-node", "3", "--virtual", "--sampler", "simulation", "--seed", "5", "--data-seed", "1",
                 "--out", str(out)]) == 0
    with (out / designs.CSV_FILE).open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["design"], r["threat_model"]) for r in rows] == [
        ("decor", "curious-observer"), ("decor", "eavesdropper"), ("muffliato", "curious-observer"),
        ("ldp", "curious-observer"), ("ldp", "eavesdropper")]
    assert {r["utility_kind"] for r in rows} == {"accuracy"}
    assert all(0.0 < float(r["utility"]) <= 1.0 for r in rows)
    for r in rows[0], rows[2], rows[3]:  # calibrated to the curious node's mean ε
        assert float(r["mean_eps"]) == pytest.approx(TARGET, rel=2e-3)
    assert float(rows[1]["mean_eps"]) <= float(rows[0]["worst_eps"])  # an outsider holds no secret

def test_compare_designs_learns_with_zero_sum_shares_at_the_target(tmp_path: Path) -> None:
    """--task learning --designs zero-sum: zero-sum-gd calibrated to the curious node's mean ε, run, audited against
    curious nodes and an eavesdropper (who sees every value, so no less than any one node)."""
    out = tmp_path / "z"
    assert main(["compare", "--designs", "zero-sum", "--task", "learning", "--graph", "ring", "--n", "4",
                 "--steps-per-node", "3", "--virtual", "--sampler", "simulation", "--seed", "5", "--data-seed", "1",
                 "--out", str(out)]) == 0
    with (out / designs.CSV_FILE).open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["design"], r["threat_model"]) for r in rows] == [("zero-sum", "curious-observer"),
                                                               ("zero-sum", "eavesdropper")]
    assert {r["utility_kind"] for r in rows} == {"accuracy"} and all(0.0 < float(r["utility"]) <= 1.0 for r in rows)
    assert float(rows[0]["mean_eps"]) == pytest.approx(TARGET, rel=2e-3)
    assert float(rows[1]["mean_eps"]) >= float(rows[0]["mean_eps"])


def test_the_decor_demo_runs_the_averaging_design() -> None:
    graph = generate("hypercube", n=16)
    args = argparse.Namespace(sigma=0.5, sensitivity=None, alpha=2.0, dimension=None, rounds=None)
    params = DECOR.params(args, graph)
    assert (params.noisy_rounds, params.sigma_cor_ratio, params.rounds) == (1, 30.0, 1 + mixing_rounds(graph))
    assert DECOR.params(argparse.Namespace(**{**vars(args), "rounds": 5}), graph).rounds == 5


@pytest.mark.parametrize(("flags", "message"), [
    (["--designs", "decor", "--graph", "hypercube", "--n", "6"], "hypercube needs n a power of 2, got n = 6"),
    (["--designs", "decor", "--target-eps", "0"], "--target-eps must be above 0, got 0"),
    (["--designs", "decor,nosuch", "--task", "learning"], "--designs: nosuch is no design; available: muffliato"),
    (["--target", "worst"], "--target worst, --virtual and --topology go with --designs"),
])
def test_a_bad_flag_is_refused_in_one_line_before_anything_is_written(
        flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", *flags, "--out", str(tmp_path / "c")]) != 0
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error
    assert not (tmp_path / "c").exists()


def test_an_edge_list_must_be_unweighted_and_connected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weighted, split = tmp_path / "weighted.txt", tmp_path / "split.txt"
    weighted.write_text("0 1 0.5\n1 2 0.5\n")
    split.write_text("0 1\n2 3\n")
    for edges, message in ((weighted, "give an unweighted edge list"), (split, "graph is not connected")):
        assert main(["compare", "--designs", "decor", "--topology", str(edges), "--out", str(tmp_path / "c")]) != 0
        assert message in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
