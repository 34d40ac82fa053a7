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
from coordinator_tools.audit.command import parse_attack_pairs
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from coordinator_tools.audit.protocols import muffliato
from coordinator_tools.audit.protocols.muffliato.transcript import Transcript
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.dataprep.datasets import write_node_files
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError, LogFormatError
from node.viewlog import read_log
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
        columns = ("paper_rdp", "paper_eps", "exact_rdp_lower", "exact_eps_lower", "exact_rdp_upper", "exact_eps_upper")
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
        "model attack lower bound <= exact (eps)": True,
        "exact <= LDP": True,
        "exact = LDP where v reconstructs u": True,
        "paper bound is an upper bound": True,
        "losses do not grow with sigma": True,
        "view logs readable and bound to this run": True,
        "sent and received records agree across nodes": True,
        "every value that reached a node is in the audited model": True,
        "every contribution was clipped (private logs)": True,
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
    attacked = ~np.isnan(pairs["model_attack_eps_lower"])
    assert set(zip(pairs["source"][attacked].tolist(), pairs["observer"][attacked].tolist())) == {(0, 1), (0, 3)}
    # 2000 replays: 1000 held out, all right, none wrong (Clopper-Pearson), both pairs' two sides together at 95%
    tpr_lower = (0.05 / 2 / 2) ** (1 / 1000)
    limit = report["summary"]["model_attack_limit"]
    assert limit["replays"] == 2000 and limit["pairs"] == 2
    assert limit["eps"] == pytest.approx(np.log((tpr_lower - 1e-5) / (1 - tpr_lower)))
    assert np.all(pairs["model_attack_eps_lower"][attacked] <= limit["eps"])
    assert f"at most ε = {limit['eps']:.4g} with 2000 replays per hypothesis" in (
        tmp_path / "out" / "index.html").read_text()
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
    assert np.all(np.isnan(pairs["model_attack_eps_lower"]))  # no attack ran


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


def test_an_averaging_audit_reports_faults_utility_and_the_combinations_each_observer_received(
        tmp_path: Path, stub: StubAccount, capsys: pytest.CaptureFixture[str]) -> None:
    topology = ring_topology()  # 6 nodes, 5 rounds, 3 coordinates
    run = simulate_run(tmp_path / "run", topology, faults=Faults(lost_edge=(0, 1), lost_from=2, crashed=3,
                                                                 crash_round=3))
    data = run.inputs.copy()
    data[0] *= 10.0  # outside the ball of radius sensitivity / 2: the truth is the clipped value
    write_node_files(data, tmp_path / "data")
    args = cli(str(run.rundir), "--out", str(tmp_path / "out"), "--attack-pairs", "none", "--data",
               str(tmp_path / "data"))
    assert args.handler(args) == 0  # the paper bound's undercount is a warning: the exit status stays 0
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    page = (tmp_path / "out" / "index.html").read_text()

    radius = topology.protocol.sensitivity / 2
    clipped = np.array([x * min(1.0, radius / np.linalg.norm(x)) for x in data])
    truth = clipped.mean(axis=0)
    finished = [v for v in range(6) if v != 3]  # node 3 crashed: no final output
    utility = report["utility"]
    assert utility["mse"] == pytest.approx(np.mean([np.mean((run.values[v][-1] - truth) ** 2) for v in finished]))
    assert (utility["nodes_scored"], utility["truth"], utility["per"]) == (5, "data", "coordinate")
    assert utility["bound"] == pytest.approx(3 * SIGMA**2 / 6) and utility["central"] == pytest.approx(SIGMA**2 / 6)
    spread = np.mean(np.sum((clipped - truth) ** 2, axis=1))
    assert utility["local"] == pytest.approx(SIGMA**2 + spread / 3)
    assert f"Utility: MSE of the final estimates against the mean of the clipped inputs (from the data): " \
           f"{utility['mse']:.4g} per coordinate over 5 nodes" in printed
    assert f"{utility['mse']:.4g} per coordinate over 5 nodes" in page

    combinations = report["combinations"]  # every value that reached the observer
    assert combinations["received_per_observer"] == [sum(map(len, run.used[v])) for v in range(6)]
    assert combinations["planned_per_observer"] == [5 * 2] * 6 and combinations["unknown_inputs"] == 5
    sentence = ("Each observer received 6–10 combinations of the others' noisy inputs (T·deg = 5·2 = 10 planned) "
                "against n − 1 = 5 unknown inputs; 12 of 30 pairs were reconstructed.")
    assert combinations["sentence"].startswith(sentence) and sentence in printed
    assert "amplification lives where T·deg is well below n" in page

    faults = report["faults"]
    logs = [read_log(run.rundir / f"node-{v}" / "view.log") for v in range(6)]
    start = min(log.records[0].logged_unix for log in logs)
    assert faults["stopped"] == [{"node": 3, "log": "intact", "rounds_completed": 3,
                                  "last_record_s": pytest.approx(logs[3].records[-1].logged_unix - start)}]
    dropped = [(v, w, t) for v in range(6) for t in range(len(run.used[v])) for w in topology.neighbours[v]
               if w not in run.used[v][t]]
    assert [(d["node"], d["peer"], d["count"]) for d in faults["drop_outs"]] == sorted(
        {(v, w, sum(1 for x in dropped if x[:2] == (v, w))) for v, w, _ in dropped})
    assert {"node": 0, "peer": 1, "count": 3, "rounds": "2-4"} in faults["drop_outs"]
    assert "Node 3 stopped after completing 3 rounds without a final output (killed or crashed)" in printed
    assert "<h2>Faults</h2>" in page and "<tr><td>0</td><td>1</td><td>3</td><td>2-4</td></tr>" in page
    assert "⚠ warning paper bound is an upper bound: the paper's bound undercounts 12 of 30 pairs" in printed
    assert "pass paper bound" not in printed
    assert "exact RDP ┃ ε ┃ paper RDP ┃ ε ┃ LDP RDP ┃ ε" in printed and "over sources u ≠ v, divided by n" in printed


def test_an_averaging_audit_without_data_says_why_it_has_no_utility(tmp_path: Path, stub: StubAccount) -> None:
    run = simulate_run(tmp_path / "run", ring_topology())
    report = audit_run(run.rundir, tmp_path / "out", AuditOptions(attack_pairs="none"))
    assert report["utility"]["mse"] is None and "--data" in report["utility"]["reason"]
    assert report["faults"] is None  # every node finished, nothing dropped
    assert "the MSE cannot be computed (no data: pass --data" in (tmp_path / "out" / "index.html").read_text()
    private = audit_run(run.rundir, tmp_path / "private", AuditOptions(attack_pairs="none", with_private_logs=True))
    truth = run.inputs.mean(axis=0)  # the private logs hold the clipped inputs
    expected = np.mean([np.mean((run.values[v][-1] - truth) ** 2) for v in range(run.topology.n)])
    assert private["utility"]["truth"] == "private logs" and private["utility"]["mse"] == pytest.approx(expected)
