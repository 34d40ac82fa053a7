"""`netdp audit` and `audit_run`: the pipeline's wiring, with the accountants stubbed out.

The stub (in place of synchronous Muffliato's accountant) returns hand-made losses, so these
tests pin what the command does with the replay, the options and the accountants' result,
not the accountants' numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit import command
from coordinator_tools.audit.protocols import muffliato
from coordinator_tools.audit.command import AuditOptions, audit_run, parse_attack_pairs
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError, LogFormatError
from tests.accounting.simulated_run import SIGMA, Faults, fake_losses, rewrite_log, ring_topology, simulate_run


class StubAccount:
    """Stands in for muffliato's account: records every call, losses shrink as sigma grows."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, transcript: Transcript, **options: object) -> PairwiseLosses:
        self.calls.append({"transcript": transcript, **options})
        attacked = ((0, 1),) if options.get("attack_pairs") else ()
        losses = fake_losses(transcript.topology, alpha=options["alpha"], delta=options["delta"], attacked=attacked)
        factor = (SIGMA / options["sigma"]) ** 2
        columns = ("paper_rdp", "paper_eps", "exact_rdp", "exact_eps", "exact_rdp_upper", "exact_eps_upper")
        return dataclasses.replace(losses, sigma=options["sigma"], **{c: getattr(losses, c) * factor for c in columns})


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> StubAccount:
    account = StubAccount()
    monkeypatch.setattr(muffliato, "account", account)
    return account


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    return parser.parse_args(["audit", *argv])


def test_audit_run_writes_everything_and_wires_the_options(tmp_path: Path, stub: StubAccount) -> None:
    topology = ring_topology()
    simulate_run(tmp_path / "run", topology, faults=Faults(lost_edge=(0, 1), lost_from=2))
    report = audit_run(tmp_path / "run", tmp_path / "out", AuditOptions(delta=1e-6, with_private_logs=True))
    for name in ("report.json", "pairs.parquet", "pairs.csv", "index.html", "loss_vs_hops.png", "pair_heatmap.png",
                 "node_means.png"):
        assert (tmp_path / "out" / name).exists(), name
    first = stub.calls[0]
    assert (first["alpha"], first["delta"], first["sigma"]) == (topology.protocol.alpha, 1e-6, SIGMA)
    assert first["attack_pairs"] == "all" and first["conversion"] == "tight"
    assert first["threat_model"].observer_knows_own_noise is True
    assert 1 not in first["transcript"].used[0][2]  # the replayed schedule, drop-outs included
    assert [call["sigma"] for call in stub.calls[1:]] == [2 * SIGMA, SIGMA]  # monotonicity, then the plan
    assert 1 in stub.calls[2]["transcript"].used[0][2]
    assert report["planned_vs_run"]["same_schedule"] is False
    assert {check["name"]: check["ok"] for check in report["checks"]} == {
        "empirical lower bound <= exact (eps)": True,
        "exact <= LDP": True,
        "exact = LDP where v reconstructs u": True,
        "paper bound undercounts (finding, not a failure)": True,
        "losses do not grow with sigma": True,
        "view logs readable and bound to this run": True,
        "sent and received records agree across nodes": True,
        "transcript reproduces the logged payloads": True,
    }
    assert report["summary"]["sampler"]["simulation"] is True
    assert report["replay"]["private_logs_read"] is True
    assert json.loads((tmp_path / "out" / "report.json").read_text())["options"]["delta"] == 1e-6


def test_audit_command_exits_1_on_a_failed_check(tmp_path: Path, stub: StubAccount,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = simulate_run(tmp_path / "run", ring_topology())
    args = cli(str(run.rundir), "--out", str(tmp_path / "ok"), "--attack-pairs", "none")
    assert args.handler(args) == 0
    assert stub.calls[0]["attack_pairs"] is None

    def tamper(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "received":
            record.received.payload.data = bytes(len(record.received.payload.data))
        return record

    rewrite_log(run.rundir / "node-0" / "view.log", tamper)
    args = cli(str(run.rundir), "--out", str(tmp_path / "bad"), "--own-noise-unknown", "--attack-pairs", "1:0")
    assert args.handler(args) == 1
    assert stub.calls[-2]["threat_model"].observer_knows_own_noise is False
    assert stub.calls[-2]["attack_pairs"] == [(1, 0)]
    printed = capsys.readouterr().out
    assert "FAIL sent and received records agree" in printed and "index.html" in printed
    assert "payload_mismatch" in (tmp_path / "bad" / "index.html").read_text()


def test_audit_refuses_unusable_inputs(tmp_path: Path, stub: StubAccount) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args = cli(str(empty), "--out", str(tmp_path / "out"))
    with pytest.raises(ConfigError, match="topology.json"):
        args.handler(args)
    run = simulate_run(tmp_path / "run", ring_topology(n=3))
    with pytest.raises(ConfigError, match="7:0"):
        audit_run(run.rundir, tmp_path / "out", AuditOptions(attack_pairs=((7, 0),)))
    for node in range(3):
        (run.rundir / f"node-{node}" / "view.log").unlink()
    with pytest.raises(LogFormatError):
        audit_run(run.rundir, tmp_path / "out")
    assert stub.calls == []


def test_attack_pairs_option_parses_pairs_and_keywords() -> None:
    assert parse_attack_pairs("all") == "all" and parse_attack_pairs("none") == "none"
    assert parse_attack_pairs("0:1,3:2") == ((0, 1), (3, 2))
    with pytest.raises(argparse.ArgumentTypeError):
        parse_attack_pairs("0-1")


def test_audit_run_with_the_real_accountants(tmp_path: Path) -> None:
    """No stub: the accountants' result must fit the report, and every invariant must hold."""
    simulate_run(tmp_path / "run", ring_topology(), faults=Faults(lost_edge=(0, 1), lost_from=2, crashed=3,
                                                                  crash_round=3))
    options = AuditOptions(attack_pairs=((0, 1), (0, 3)), attack_runs=2000, attack_seed=0, with_private_logs=True)
    report = audit_run(tmp_path / "run", tmp_path / "out", options)
    failed = [check for check in report["checks"] if not check["ok"]]
    assert failed == []
    pairs = read_pairs(tmp_path / "out")
    attacked = ~np.isnan(pairs["empirical_eps_lower"])
    assert set(zip(pairs["source"][attacked].tolist(), pairs["observer"][attacked].tolist())) == {(0, 1), (0, 3)}
    assert report["planned_vs_run"]["same_schedule"] is False


def test_a_small_audit_writes_and_lists_every_pair_from_the_accountants_arrays(tmp_path: Path) -> None:
    topology = ring_topology()
    n = topology.n
    simulate_run(tmp_path / "run", topology)
    audit_run(tmp_path / "run", tmp_path / "out", AuditOptions(attack_pairs="none"))
    document = json.loads((tmp_path / "out" / "report.json").read_text())
    assert document["pairs_file"]["rows"] == len(document["pairs"]) == n * (n - 1)
    replay = replay_run(tmp_path / "run")
    losses = replay.auditor.account(replay.realized, sigma=SIGMA, sensitivity=replay.effective_sensitivity,
                                    alpha=topology.protocol.alpha, delta=command.DEFAULT_DELTA,
                                    threat_model=ThreatModel(), conversion="tight")
    pairs = read_pairs(tmp_path / "out")
    assert len(pairs["source"]) == n * (n - 1)
    off = ~np.eye(n, dtype=bool)
    for name, matrix in (("paper_rdp", losses.paper_rdp), ("exact_rdp", losses.exact_rdp),
                         ("exact_eps_upper", losses.exact_eps_upper), ("ldp_eps", losses.ldp_pairs("eps"))):
        np.testing.assert_array_equal(pair_matrix(pairs, name, n)[off], matrix[off], err_msg=name)
    np.testing.assert_array_equal(pairs["exact_reconstructable"], losses.reconstructable[off])
    listed = np.array([[p["source"], p["observer"], p["exact"]["rdp"]] for p in document["pairs"]])
    np.testing.assert_array_equal(listed[:, 2], losses.exact_rdp[listed[:, 0].astype(int), listed[:, 1].astype(int)])
    assert np.all(np.isnan(pairs["empirical_eps_lower"]))  # no attack ran


def test_audit_refuses_a_folder_that_holds_a_report_unless_forced(tmp_path: Path, stub: StubAccount) -> None:
    run = simulate_run(tmp_path / "run", ring_topology(n=3))
    args = cli(str(run.rundir), "--out", str(tmp_path / "out"), "--attack-pairs", "none")
    assert args.handler(args) == 0
    with pytest.raises(ConfigError, match="already holds a report .*--force") as error:
        args.handler(args)
    assert "\n" not in str(error.value) and len(stub.calls) == 2  # the refused call accounted nothing
    forced = cli(str(run.rundir), "--out", str(tmp_path / "out"), "--attack-pairs", "none", "--force")
    assert forced.handler(forced) == 0


def test_audit_exports_the_pairs_as_csv_when_asked_beyond_the_small_runs(tmp_path: Path, stub: StubAccount,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coordinator_tools.audit.pairs_file.CSV_AUTO_MAX_N", 2)
    run = simulate_run(tmp_path / "run", ring_topology(n=3))
    for out, flags in (("plain", ()), ("asked", ("--csv",))):
        args = cli(str(run.rundir), "--out", str(tmp_path / out), "--attack-pairs", "none", *flags)
        assert args.handler(args) == 0
    assert (tmp_path / "plain" / "pairs.parquet").exists() and not (tmp_path / "plain" / "pairs.csv").exists()
    assert len((tmp_path / "asked" / "pairs.csv").read_text().splitlines()) == 1 + 3 * 2
    assert 'href="pairs.csv"' in (tmp_path / "asked" / "index.html").read_text()
    assert 'href="pairs.csv"' not in (tmp_path / "plain" / "index.html").read_text()


def test_audit_without_noise_says_so_once_and_still_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = simulate_run(tmp_path / "run", ring_topology(n=4, rounds=2, sigma=0.0))
    args = cli(str(run.rundir), "--out", str(tmp_path / "out"), "--attack-pairs", "none")
    args.handler(args)
    printed = capsys.readouterr().out
    assert printed.count("σ = 0: no privacy") == 1 and "inf" not in printed
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["sigma"] == 0 and np.isinf(read_pairs(tmp_path / "out")["exact_rdp"]).any()
