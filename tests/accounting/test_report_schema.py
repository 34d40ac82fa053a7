"""The report document, its CSV, and the invariant checks, on hand-made accountant results."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.checks import (
    Check,
    empirical_below_exact,
    exact_below_ldp,
    loss_checks,
    monotone_in_sigma,
    paper_undercounts,
    reconstructable_is_ldp,
)
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.report import PAIR_COLUMNS, build_report, write_report
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from tests.accounting.simulated_run import fake_losses, ring_topology

TOPOLOGY = ring_topology(n=6)
N = TOPOLOGY.n
TOP_LEVEL = {"schema", "protocol", "run", "alpha", "delta", "sigma", "sensitivity", "threat_model", "pairs", "baselines",
             "summary", "checks", "notes"}


def report_for(losses: PairwiseLosses, **kwargs: object) -> dict:
    return build_report(losses, planned_transcript(TOPOLOGY), **kwargs)


def strict_json(path: Path) -> dict:
    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON constant {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_report_has_every_schema_field() -> None:
    losses = fake_losses(TOPOLOGY, attacked=((0, 1), (2, 5)))
    report = report_for(losses, checks=[Check("c", True, "d")], sampler_kinds={v: "secure" for v in range(N)},
                        extra={"replay": {"x": 1}})
    assert set(report) == TOP_LEVEL | {"replay"}
    assert len(report["pairs"]) == N * (N - 1)
    pair = next(p for p in report["pairs"] if (p["source"], p["observer"]) == (0, 3))
    assert pair["hop_distance"] == 3  # opposite side of the ring
    assert set(pair) == {"source", "observer", "hop_distance", "paper", "exact", "ldp", "paper_undercounts"}
    assert set(pair["exact"]) == {"rdp", "eps", "rdp_upper", "eps_upper", "reconstructable", "ill_conditioned"}
    assert set(pair["paper"]) == set(pair["ldp"]) == {"rdp", "eps"}
    assert pair["exact"]["rdp"] == losses.exact_rdp[0, 3]
    attacked = {(p["source"], p["observer"]): p["empirical"]["eps_lower"] for p in report["pairs"] if "empirical" in p}
    assert attacked == {(0, 1): losses.empirical_eps_lower[0, 1], (2, 5): losses.empirical_eps_lower[2, 5]}
    assert report["baselines"] == {"ldp": {"rdp": losses.ldp_rdp, "eps": losses.ldp_eps},
                                   "central": {"rdp": losses.central_rdp, "eps": losses.central_eps}}
    assert report["threat_model"]["observer_knows_own_noise"] is True
    assert report["checks"] == [{"name": "c", "ok": True, "detail": "d"}]
    assert report["run"]["messages_used"] == report["run"]["messages_planned"] == 5 * 2 * N
    assert report["protocol"] == report["run"]["protocol"] == "muffliato"


def test_report_summary_means_maxima_and_undercounts() -> None:
    losses = fake_losses(TOPOLOGY)
    losses.exact_rdp_upper[4, 2] *= 1.01  # make observer 2 the worst
    summary = report_for(losses, sampler_kinds={0: "simulation", **{v: "secure" for v in range(1, N)}})["summary"]
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


def test_report_for_a_plan_needs_no_logs() -> None:
    summary = report_for(fake_losses(TOPOLOGY))["summary"]
    assert summary["sampler"] is None


def test_report_extra_cannot_overwrite_the_schema() -> None:
    with pytest.raises(ValueError, match="pairs"):
        report_for(fake_losses(TOPOLOGY), extra={"pairs": []})


def test_report_json_and_csv_rows(tmp_path: Path) -> None:
    losses = fake_losses(TOPOLOGY, attacked=((1, 0),))
    losses.paper_rdp[0, 3] = np.nan  # no value
    losses.exact_rdp_upper[0, 3] = np.inf  # no noise
    json_path, csv_path = write_report(report_for(losses), tmp_path)
    pair = next(p for p in strict_json(json_path)["pairs"] if (p["source"], p["observer"]) == (0, 3))
    assert pair["paper"]["rdp"] is None and pair["exact"]["rdp_upper"] == "inf"
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == N * (N - 1)
    assert tuple(rows[0]) == PAIR_COLUMNS
    row = next(r for r in rows if (r["source"], r["observer"]) == ("0", "3"))
    assert (row["paper_rdp"], row["exact_rdp_upper"], row["empirical_eps_lower"]) == ("", "inf", "")
    attacked = next(r for r in rows if (r["source"], r["observer"]) == ("1", "0"))
    assert float(attacked["empirical_eps_lower"]) == losses.empirical_eps_lower[1, 0]
    assert {r["paper_undercounts"] for r in rows} == {"True", "False"}


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


def test_check_empirical_above_exact_fails() -> None:
    losses = fake_losses(TOPOLOGY, attacked=((0, 2), (3, 4)))
    assert empirical_below_exact(losses).ok
    losses.empirical_eps_lower[3, 4] = losses.exact_eps_upper[3, 4] + 0.1
    check = empirical_below_exact(losses)
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


def test_paper_undercount_is_a_finding_not_a_failure() -> None:
    losses = fake_losses(TOPOLOGY)
    check = next(c for c in loss_checks(losses) if c.name.startswith("paper bound undercounts"))
    assert check.ok and check.detail.startswith(f"{2 * N} of {N * (N - 1)} pairs")
    losses.paper_rdp[:] = losses.exact_rdp
    assert paper_undercounts(losses) == []


def scaled(losses: PairwiseLosses, factor: float, *, sigma: float) -> PairwiseLosses:
    """The same losses with every pairwise column multiplied by factor (as if noise had grown)."""
    columns = ("paper_rdp", "paper_eps", "exact_rdp", "exact_eps", "exact_rdp_upper", "exact_eps_upper")
    return dataclasses.replace(losses, sigma=sigma, **{c: getattr(losses, c) * factor for c in columns},
                               ldp_rdp=losses.ldp_rdp * factor, ldp_eps=losses.ldp_eps * factor)
