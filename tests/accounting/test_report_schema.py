"""The report document, its pairs file and CSV export, and the invariant checks, on hand-made accountant results."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from coordinator_tools.audit import report as report_module
from coordinator_tools.audit.attack import resolution_limit
from coordinator_tools.audit.checks import (
    UNDERCOUNT_CHECK,
    Check,
    exact_below_ldp,
    loss_checks,
    model_attack_below_exact,
    monotone_in_sigma,
    paper_undercounts,
    reconstructable_is_ldp,
)
from coordinator_tools.audit.html import write_html
from coordinator_tools.audit.losses import PairColumn, PairwiseLosses
from coordinator_tools.audit.pairs_file import PAIR_COLUMNS, PairTable, pair_matrix, read_pairs, write_pairs
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.report import Report, build_report, write_report
from coordinator_tools.audit.report_schema import AuditReport, dump_report, load_report
from tests.accounting.simulated_run import fake_losses, ring_topology

TOPOLOGY = ring_topology(n=6)
N = TOPOLOGY.n
TOP_LEVEL = {"schema", "protocol", "run", "alpha", "delta", "sigma", "sensitivity", "threat_model", "pairs",
             "pairs_listed", "pairs_file", "baselines", "summary", "checks", "notes", "column_definitions"}


def report_for(losses: PairwiseLosses, **kwargs: object) -> Report:
    return build_report(losses, planned_transcript(TOPOLOGY), **kwargs)


def strict_json(path: Path) -> dict:
    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON constant {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


def pair_row(pairs: dict[str, np.ndarray], u: int, v: int) -> dict[str, object]:
    """One pair's values from `read_pairs` columns."""
    (index,) = np.flatnonzero((pairs["source"] == u) & (pairs["observer"] == v))
    return {name: column[index] for name, column in pairs.items()}


def test_report_has_every_schema_field(tmp_path: Path) -> None:
    losses = fake_losses(TOPOLOGY, attacked=((0, 1), (2, 5)))
    report = report_for(losses, checks=[Check("c", True, "d")], sampler_kinds={v: "secure" for v in range(N)},
                        extra={"replay": {"x": 1}})
    document = report.document
    assert set(document) == TOP_LEVEL | {"replay"}
    assert document["schema"] == "netdp.audit.report/5"
    assert document["pairs_file"] == {"file": "pairs.parquet", "format": "parquet", "rows": N * (N - 1),
                                 "row_group_rows": document["pairs_file"]["row_group_rows"],
                                 "columns": list(PAIR_COLUMNS), "csv": "pairs.csv"}
    write_report(report, tmp_path)
    pairs = read_pairs(tmp_path)
    assert list(pairs) == list(PAIR_COLUMNS) and all(len(c) == N * (N - 1) for c in pairs.values())
    pair = pair_row(pairs, 0, 3)
    assert pair["hop_distance"] == 3  # opposite side of the ring
    assert pair["exact_rdp"] == losses.exact_rdp[0, 3] and pair["paper_eps"] == losses.paper_eps[0, 3]
    assert np.isnan(pair["paper_corrected_rdp"]) and np.isnan(pair["realized_path_eps"])  # no such column here
    attacked = {(int(u), int(v)): e for u, v, e in zip(pairs["source"], pairs["observer"],
                                                        pairs["model_attack_eps_lower"]) if not np.isnan(e)}
    assert attacked == {(0, 1): losses.model_attack_eps_lower[0, 1], (2, 5): losses.model_attack_eps_lower[2, 5]}
    assert document["baselines"] == {"ldp": {"rdp": losses.ldp_rdp, "eps": losses.ldp_eps},
                                     "central": {"rdp": losses.central_rdp, "eps": losses.central_eps}}
    assert document["threat_model"]["observer_knows_own_noise"] is True
    assert document["checks"] == [{"name": "c", "ok": True, "level": "pass", "detail": "d"}]
    assert document["run"]["messages_used"] == document["run"]["messages_planned"] == 5 * 2 * N
    assert document["protocol"] == document["run"]["protocol"] == "muffliato"


def test_report_summary_means_maxima_and_undercounts() -> None:
    losses = fake_losses(TOPOLOGY)
    losses.exact_rdp_upper[4, 2] *= 1.01  # make observer 2 the worst
    summary = report_for(losses, sampler_kinds={0: "simulation", **{v: "secure" for v in range(1, N)}}
                         ).document["summary"]
    means = summary["mean_rdp_per_observer"]
    assert means["exact"][2] == pytest.approx(sum(losses.exact_rdp[u, 2] for u in range(N) if u != 2) / N)
    assert means["ldp"][0] == pytest.approx((N - 1) / N * losses.ldp_rdp)
    assert summary["max_mean_rdp"]["exact_upper"]["observer"] == 2
    # The fake paper column is a third of the exact one on neighbours only.
    undercounted = {(p["source"], p["observer"]) for p in summary["paper_undercounts"]["pairs"]}
    assert undercounted == {(u, v) for u in range(N) for v in range(N) if abs(u - v) in (1, N - 1)}
    assert summary["paper_undercounts"]["count"] == 2 * N
    assert summary["paper_undercounts"]["pairs"][0]["exact_over_paper"] == pytest.approx(3.0)
    assert summary["reconstructable_pairs"] == 2 * N and summary["attacked_pairs"] == 0
    assert summary["sampler"]["simulation"] is True and summary["sampler"]["nodes_by_kind"]["simulation"] == [0]
    assert "simulation sampler" in summary["sampler"]["note"]


def test_report_summarises_every_column_and_the_worst_pairs() -> None:
    losses = fake_losses(TOPOLOGY)
    losses.exact_eps_upper[3, 5] = np.inf  # no noise on one pair: the worst, whatever the others
    summary = report_for(losses).document["summary"]
    eps = losses.exact_eps_upper[~np.eye(N, dtype=bool)]
    spread = summary["pair_columns"]["exact_eps_upper"]
    assert spread["count"] == N * (N - 1) and spread["mean"] == spread["max"] == "inf"
    assert spread["min"] == eps.min() and len(spread["quantiles"]) == len(summary["quantile_levels"])
    assert spread["quantiles"][summary["quantile_levels"].index(0.5)] in eps
    assert "model_attack_eps_lower" not in summary["pair_columns"]  # the attack did not run: no value to summarise
    top = summary["top_pairs"]
    assert (top[0]["source"], top[0]["observer"], top[0]["exact_eps_upper"]) == (3, 5, "inf")
    assert len(top) == min(20, N * (N - 1))
    shown = [pair["exact_eps_upper"] for pair in top[1:]]
    assert shown == sorted(shown, reverse=True) and shown[0] == np.sort(eps)[-2]


def test_summary_lists_a_bounded_number_of_undercounting_pairs() -> None:
    topology = ring_topology(n=12)
    losses = fake_losses(topology)
    losses.paper_rdp[:] = losses.exact_rdp / 2.0  # every pair undercounted
    losses.paper_rdp[7, 2] = losses.exact_rdp[7, 2] / 10.0
    summary = build_report(losses, planned_transcript(topology)).document["summary"]
    assert summary["paper_undercounts"]["count"] == 12 * 11
    listed = summary["paper_undercounts"]["pairs"]
    assert len(listed) == 20 and (listed[0]["source"], listed[0]["observer"]) == (7, 2)
    assert listed[0]["exact_over_paper"] == pytest.approx(10.0)


def test_report_for_a_plan_needs_no_logs() -> None:
    summary = report_for(fake_losses(TOPOLOGY)).document["summary"]
    assert summary["sampler"] is None


def test_report_extra_cannot_overwrite_the_schema() -> None:
    with pytest.raises(ValueError, match="pairs"):
        report_for(fake_losses(TOPOLOGY), extra={"pairs": []})


def test_the_listed_pairs_and_the_file_keep_nulls_and_inf(tmp_path: Path) -> None:
    losses = fake_losses(TOPOLOGY, attacked=((1, 0),))
    losses.paper_rdp[0, 3] = np.nan  # no value
    losses.exact_rdp_upper[0, 3] = np.inf  # no noise
    json_path, parquet_path, _ = write_report(report_for(losses), tmp_path)
    document = strict_json(json_path)
    assert set(document["pairs_file"]) == {"file", "format", "rows", "row_group_rows", "columns", "csv"}
    listed = next(p for p in document["pairs"] if (p["source"], p["observer"]) == (0, 3))
    assert listed["paper"]["rdp"] is None and listed["exact"]["rdp_upper"] == "inf"
    assert parquet_path == tmp_path / "pairs.parquet"
    file = pq.read_table(parquet_path)
    assert file.column("paper_rdp").null_count == 1  # (0, 3) only: the diagonal is not a row
    pair = pair_row(read_pairs(json_path), 0, 3)
    assert np.isnan(pair["paper_rdp"]) and pair["exact_rdp_upper"] == np.inf
    assert file.column("model_attack_eps_lower").null_count == N * (N - 1) - 1


def test_csv_export_has_the_same_rows(tmp_path: Path) -> None:
    losses = fake_losses(TOPOLOGY, attacked=((1, 0),))
    losses.paper_rdp[0, 3] = np.nan  # no value
    losses.exact_rdp_upper[0, 3] = np.inf  # no noise
    _, _, csv_path = write_report(report_for(losses), tmp_path)
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == N * (N - 1)
    assert tuple(rows[0]) == PAIR_COLUMNS
    row = next(r for r in rows if (r["source"], r["observer"]) == ("0", "3"))
    assert (row["paper_rdp"], row["exact_rdp_upper"], row["model_attack_eps_lower"]) == ("", "inf", "")
    assert float(row["exact_rdp"]) == losses.exact_rdp[0, 3]  # full precision
    attacked = next(r for r in rows if (r["source"], r["observer"]) == ("1", "0"))
    assert float(attacked["model_attack_eps_lower"]) == losses.model_attack_eps_lower[1, 0]
    assert {r["paper_undercounts"] for r in rows} == {"true", "false"}


def test_csv_export_only_when_asked_beyond_the_small_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coordinator_tools.audit.pairs_file.CSV_AUTO_MAX_N", N - 1)
    (tmp_path / "pairs.csv").write_text("an export of an earlier report\n")
    written = write_report(report_for(fake_losses(TOPOLOGY)), tmp_path)
    assert [path.name for path in written] == ["report.json", "pairs.parquet"]
    assert not (tmp_path / "pairs.csv").exists()  # not left over from the earlier report
    assert strict_json(tmp_path / "report.json")["pairs_file"]["csv"] is None
    asked = report_for(fake_losses(TOPOLOGY), csv=True, pairs_stem="plan-pairs")
    written = write_report(asked, tmp_path, json_name="plan.json")
    assert [path.name for path in written] == ["plan.json", "plan-pairs.parquet", "plan-pairs.csv"]
    assert len((tmp_path / "plan-pairs.csv").read_text().splitlines()) == 1 + N * (N - 1)


def test_pairs_file_round_trips_values_nulls_and_inf_in_bounded_row_groups(tmp_path: Path) -> None:
    n = 7
    rng = np.random.default_rng(3)
    values = rng.exponential(size=(n, n))
    values[1, 4], values[2, 0], values[5, 6] = np.inf, np.nan, 0.0
    hops = rng.integers(1, 4, size=(n, n)).astype(float)
    hops[3, 1] = np.inf  # unreachable: null
    flags = rng.random((n, n)) < 0.5
    table = PairTable(n, {"hop_distance": hops, "exact_rdp": values, "exact_reconstructable": flags,
                          "ldp_rdp": np.broadcast_to(1.5, (n, n)), "paper_rdp": None})
    path = write_pairs(table, tmp_path / "pairs.parquet")
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_rows == n * (n - 1)
    table_rows = list(table.batches(rows=2 * (n - 1)))  # two sources a block
    assert [batch.num_rows for batch in table_rows] == [2 * (n - 1)] * 3 + [n - 1]
    pairs = read_pairs(path)
    assert list(pairs) == ["source", "observer", "hop_distance", "exact_rdp", "exact_reconstructable", "ldp_rdp",
                           "paper_rdp"]
    assert pairs["source"].dtype == np.int64 and pairs["exact_reconstructable"].dtype == bool
    assert not np.any(pairs["source"] == pairs["observer"])
    expected = values.copy()
    np.fill_diagonal(expected, np.nan)
    np.testing.assert_array_equal(pair_matrix(pairs, "exact_rdp", n), expected)  # NaN where NaN, inf kept
    assert pq.read_table(path).column("exact_rdp").null_count == 1  # NaN is written as null
    reached = pair_matrix(pairs, "hop_distance", n)
    assert np.isnan(reached[3, 1]) and reached[1, 3] == hops[1, 3]
    assert pq.read_table(path).column("hop_distance").type == "int32"
    off = ~np.eye(n, dtype=bool)
    np.testing.assert_array_equal(pairs["exact_reconstructable"], flags[off])
    assert np.all(pairs["ldp_rdp"] == 1.5) and np.all(np.isnan(pairs["paper_rdp"]))


def test_protocol_columns_and_facts_follow_the_common_ones(tmp_path: Path) -> None:
    losses = fake_losses(TOPOLOGY)
    walk = np.full((N, N), 0.25)
    losses.columns["ex_ante"] = PairColumn(rdp=walk, eps=2 * walk)
    losses.facts["communicability"] = np.arange(N * N, dtype=float).reshape(N, N)
    report = report_for(losses)
    assert report.document["pairs_file"]["columns"] == [*PAIR_COLUMNS, "communicability"]
    write_report(report, tmp_path)
    pairs = read_pairs(tmp_path, ["source", "observer", "ex_ante_eps", "communicability"])
    assert np.all(pairs["ex_ante_eps"] == 0.5)
    np.testing.assert_array_equal(pairs["communicability"], pairs["source"] * N + pairs["observer"])


def test_checks_pass_on_consistent_losses() -> None:
    losses = fake_losses(TOPOLOGY, attacked=((0, 1),))
    seen: list[float] = []

    def at_sigma(sigma: float) -> PairwiseLosses:
        seen.append(sigma)
        return scaled(losses, 0.25, sigma=sigma)

    checks = loss_checks(losses, recompute=at_sigma)
    assert seen == [2.0 * losses.sigma]
    assert [c.ok for c in checks] == [True] * 5
    assert checks[-1].name == "losses do not grow with sigma"


def test_check_exact_above_ldp_fails_and_names_the_pair() -> None:
    losses = fake_losses(TOPOLOGY)
    losses.exact_rdp[2, 4] = 1.5 * losses.ldp_rdp
    check = exact_below_ldp(losses)
    assert not check.ok and "2->4" in check.detail and check.detail.startswith("1 pairs")


def test_check_model_attack_above_exact_fails() -> None:
    losses = fake_losses(TOPOLOGY, attacked=((0, 2), (3, 4)))
    assert model_attack_below_exact(losses).ok
    losses.model_attack_eps_lower[3, 4] = losses.exact_eps_upper[3, 4] + 0.1
    check = model_attack_below_exact(losses)
    assert not check.ok and "3->4" in check.detail


def test_check_reconstructable_pair_below_ldp_fails() -> None:
    losses = fake_losses(TOPOLOGY)
    losses.exact_rdp_upper[1, 2] *= 0.9  # flagged reconstructable, yet below LDP
    check = reconstructable_is_ldp(losses)
    assert not check.ok and "1->2" in check.detail


def test_check_loss_growing_with_sigma_fails() -> None:
    losses = fake_losses(TOPOLOGY)
    doubled = scaled(losses, 0.25, sigma=2 * losses.sigma)
    doubled.exact_eps_upper[5, 0] = losses.exact_eps_upper[5, 0] * 2
    check = monotone_in_sigma(losses, doubled)
    assert not check.ok and "exact_eps_upper" in check.detail and "5->0" in check.detail


def test_paper_undercount_is_a_warning_not_a_pass_nor_a_failure() -> None:
    losses = fake_losses(TOPOLOGY)  # the paper column is a third of the exact one on the 2N neighbour pairs
    check = next(c for c in loss_checks(losses) if c.name == UNDERCOUNT_CHECK)
    assert check.ok and check.level == "warning"
    assert check.to_json() == {"name": UNDERCOUNT_CHECK, "ok": True, "level": "warning", "detail": check.detail}
    assert check.detail.startswith(f"the paper's bound undercounts {2 * N} of {N * (N - 1)} pairs (by up to 3x): "
                                   "it is not an upper bound here")
    losses.paper_rdp[:] = losses.exact_rdp
    assert not paper_undercounts(losses).any()
    check = next(c for c in loss_checks(losses) if c.name == UNDERCOUNT_CHECK)
    assert check.ok and check.level == "pass" and f"all {N * (N - 1)} pairs" in check.detail
    assert Check("x", False, "y", warning=True).level == "fail"  # a failure is never downgraded


def test_an_exact_column_given_the_path_is_compared_for_what_it_is(tmp_path: Path) -> None:
    """Where exact is conditioned on a walk's path, the line and the page name that comparison, not an undercount."""
    losses = fake_losses(TOPOLOGY)
    losses.exact_given = "the realized path"
    check = next(c for c in loss_checks(losses) if c.name.startswith("paper bound"))
    assert check.name == "paper bound (ex ante) vs exact given the realized path" and check.level == "warning"
    assert check.detail.startswith(f"the paper's bound is below the exact loss given the realized path on {2 * N} "
                                   f"of {N * (N - 1)} pairs (by up to 3x): not the same quantity")
    report = report_for(losses, checks=loss_checks(losses))
    assert report.document["summary"]["paper_undercounts"]["exact_given"] == "the realized path"
    write_report(report, tmp_path)
    page = write_html(report.document, tmp_path, {}).read_text()
    assert "ex ante over the realized path, is below the exact loss given the realized path (which the observer " \
           "is not told)" in page
    assert "undercounts" not in page


def test_checks_flags_and_summaries_lead_with_the_upper_end_of_the_exact_interval() -> None:
    """An interval [lower, upper] with lower = upper / 2: a pair whose upper end passes LDP fails `exact <= LDP`
    though its lower end does not; a paper bound between the ends undercounts; `exact` in the pair objects and
    the summary means is the upper end, and the lower end is named `*_lower`."""
    base = fake_losses(TOPOLOGY)
    losses = dataclasses.replace(base, exact_rdp_lower=base.exact_rdp_upper / 2,
                                 exact_eps_lower=base.exact_eps_upper / 2)
    losses.exact_rdp_upper[2, 4] = 1.5 * losses.ldp_rdp
    assert losses.exact_rdp_lower[2, 4] < losses.ldp_rdp
    check = exact_below_ldp(losses)
    assert not check.ok and "2->4" in check.detail
    losses.paper_rdp[:] = 0.9 * losses.exact_rdp_upper  # above every lower end, below every upper end
    off = ~np.eye(N, dtype=bool)
    assert paper_undercounts(losses)[off].all()
    document = report_for(losses).document
    assert document["summary"]["paper_undercounts"]["count"] == N * (N - 1)
    pair = next(p for p in document["pairs"] if (p["source"], p["observer"]) == (2, 4))
    assert pair["exact"]["rdp"] == pair["exact"]["rdp_upper"] == 1.5 * losses.ldp_rdp
    assert pair["exact"]["rdp_lower"] == losses.exact_rdp_lower[2, 4]
    assert pair["exact"]["eps_lower"] == losses.exact_eps_lower[2, 4]
    means = document["summary"]["mean_rdp_per_observer"]
    assert means["exact"] == means["exact_upper"]
    assert means["exact_lower"][4] == pytest.approx(sum(losses.exact_rdp_lower[u, 4] for u in range(N) if u != 4) / N)


def test_report_gives_every_mean_in_epsilon_too() -> None:
    losses = fake_losses(TOPOLOGY)
    means = report_for(losses).document["summary"]["mean_eps_per_observer"]
    assert set(means) == {"paper", "exact", "exact_upper", "exact_lower", "ldp"}
    for v in range(N):  # (1/n) sum over the sources u != v
        sources = [u for u in range(N) if u != v]
        assert means["exact_upper"][v] == pytest.approx(sum(losses.exact_eps_upper[u, v] for u in sources) / N)
        assert means["paper"][v] == pytest.approx(sum(losses.paper_eps[u, v] for u in sources) / N)
    assert means["ldp"][0] == pytest.approx((N - 1) / N * losses.ldp_eps)


@pytest.mark.parametrize("runs", [2000, 2001, 20_000])
@pytest.mark.parametrize("attacked", [((0, 1),), ((0, 1), (2, 3))])
def test_the_attacks_resolution_limit_is_the_clopper_pearson_bound_of_perfect_separation(
        runs: int, attacked: tuple[tuple[int, int], ...]) -> None:
    held_out = runs - runs // 2  # the replays the threshold is counted on
    tail = 0.05 / 2 / len(attacked)  # every attacked pair's two sides hold together at 95% (Bonferroni)
    tpr_lower = tail ** (1 / held_out)  # Clopper-Pearson, all held-out replays right
    fpr_upper = 1 - tail ** (1 / held_out)  # and none wrong
    by_hand = np.log((tpr_lower - 1e-5) / fpr_upper)
    assert resolution_limit(runs, 1e-5, len(attacked)) == pytest.approx(by_hand, rel=1e-12)
    losses = dataclasses.replace(fake_losses(TOPOLOGY, attacked=attacked), attack_runs=runs)
    limit = report_for(losses).document["summary"]["model_attack_limit"]
    assert limit == {"eps": pytest.approx(by_hand, rel=1e-12), "replays": runs, "pairs": len(attacked),
                     "confidence": 0.95}
    assert report_for(fake_losses(TOPOLOGY)).document["summary"]["model_attack_limit"] is None  # no attack ran


def scaled(losses: PairwiseLosses, factor: float, *, sigma: float) -> PairwiseLosses:
    """The same losses with every pairwise column multiplied by factor (as if noise had grown)."""
    columns = ("paper_rdp", "paper_eps", "exact_rdp_lower", "exact_eps_lower", "exact_rdp_upper", "exact_eps_upper")
    return dataclasses.replace(losses, sigma=sigma, **{c: getattr(losses, c) * factor for c in columns},
                               ldp_rdp=losses.ldp_rdp * factor, ldp_eps=losses.ldp_eps * factor)


def test_column_summary_of_huge_finite_losses_does_not_overflow() -> None:
    losses = fake_losses(TOPOLOGY)
    losses.exact_eps_upper[:] = 1e308  # a nearly noiseless run: finite, but their sum is not
    with np.errstate(over="raise"):
        spread = report_for(losses).document["summary"]["pair_columns"]["exact_eps_upper"]
    assert spread["mean"] == pytest.approx(1e308) and spread["max"] == 1e308


def test_a_small_report_lists_every_pair_as_an_object_as_the_file_holds_it() -> None:
    losses = fake_losses(TOPOLOGY, attacked=((0, 1), (2, 5)))
    document = report_for(losses).document
    assert document["pairs_listed"] == {"count": N * (N - 1), "of": N * (N - 1), "which": "all"}
    pairs = {(p["source"], p["observer"]): p for p in document["pairs"]}
    assert len(pairs) == N * (N - 1) and all(u != v for u, v in pairs)
    pair = pairs[(0, 3)]
    assert pair["hop_distance"] == 3 and pair["exact"]["rdp"] == losses.exact_rdp[0, 3]
    assert pair["ldp"]["eps"] == losses.ldp_pairs("eps")[0, 3] and pair["paper"]["eps"] == losses.paper_eps[0, 3]
    assert pair["exact"]["reconstructable"] == bool(losses.reconstructable[0, 3])
    assert {key for key, p in pairs.items() if "model_attack" in p} == {(0, 1), (2, 5)}  # only attacked pairs have one


def test_a_large_report_lists_its_worst_pairs_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_module, "INLINE_PAIRS_MAX_N", N - 1)
    losses = fake_losses(TOPOLOGY)
    document = report_for(losses).document
    listed = document["pairs"]
    assert document["pairs_listed"]["count"] == len(listed) == report_module.SHOWN_PAIRS < N * (N - 1)
    assert document["pairs_listed"]["of"] == N * (N - 1) and document["pairs_listed"]["which"] != "all"
    worst = [p["exact"]["eps_upper"] for p in listed]
    assert worst == sorted(worst, reverse=True)
    assert worst[0] == np.max(losses.exact_eps_upper[~np.eye(N, dtype=bool)])


def test_a_written_report_reads_back_into_the_model(tmp_path: Path) -> None:
    losses = fake_losses(TOPOLOGY, attacked=((0, 1), (2, 5)))
    report = report_for(losses, checks=[Check("c", True, "d")], sampler_kinds={v: "secure" for v in range(N)},
                        extra={"replay": {"x": 1}, "own_block": {"a": [1, 2]}})
    json_path, *_ = write_report(report, tmp_path)
    loaded = load_report(json_path)
    assert loaded.summary.sampler is not None and loaded.summary.sampler.nodes_by_kind == {"secure": list(range(N))}
    assert loaded.pairs_file.rows == N * (N - 1) and loaded.checks[0].level == "pass"
    assert loaded.model_extra == {"own_block": {"a": [1, 2]}}  # a plug-in's block passes through
    assert dump_report(loaded) == strict_json(json_path)
    with pytest.raises(ValueError, match="would overwrite the schema's own"):
        report_for(losses, extra={"assumptions": {}})
    with pytest.raises(ValidationError, match="pairs_listed"):
        AuditReport.model_validate({**strict_json(json_path), "pairs_listed": {"count": 1}})
