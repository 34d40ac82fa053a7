"""`netdp run --virtual`: every node in one process, logs the auditor cannot tell from a networked run's.

The networked comparison starts real node processes (marked `cluster`); the other tests run
in this process or in one subprocess. Run this file through the cluster lock on shared machines.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.cli import main
from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from coordinator_tools.cluster.virtual import run_virtual, virtual_network
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor
from node.protocols.muffliato import MuffliatoParams
from node.topology import save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

REPO = Path(__file__).resolve().parents[2]


def test_a_virtual_64_node_muffliato_run_goes_through_netdp_run_and_audits_clean(make_cluster_files, tmp_path,
                                                                                  capsys):
    files = make_cluster_files("hypercube", 64, sigma=0.5, rounds=6, dimension=2, name="virtual-64")
    rundir = files.root / "run"
    argv = ["run", str(files.topology_path), "--data", str(files.data_dir), "--out", str(rundir), "--virtual",
            "--sampler", "simulation", "--sim-seed", "5"]
    assert main(argv) == 0
    said = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert said.startswith("node processes up: 1/1")  # progress as plain lines: the output is no terminal
    assert "local steps started: " in said and "64/64 nodes finished; logs and estimates in" in said
    summary = json.loads((rundir / "run.json").read_text())
    assert (summary["n"], summary["sampler"], summary["tls"], summary["timed_out"]) == (64, "simulation", False, False)
    assert all(node["exit_code"] == 0 and node["finished"] and node["rounds_started"] == 6
               for node in summary["nodes"])
    for v in range(64):
        log = read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME)
        assert log.damage is None and log.header.sampler_kind == "simulation" and log.header.node_id == v
        assert not log.of_kind("drop_out") and not log.of_kind("rejected")
        assert json.loads((node_log_dir(rundir, v) / "estimate.json").read_text())["rounds_completed"] == 6

    assert_round_timing_matches_the_logs(summary["round_timing"], rundir, nodes=range(64), rounds=6)

    assert main(["audit", str(rundir), "--out", str(tmp_path / "audit")]) == 0
    report = json.loads((tmp_path / "audit" / "report.json").read_text())
    assert report["checks"] and all(check["ok"] for check in report["checks"]), report["checks"]


def assert_round_timing_matches_the_logs(timing: dict, rundir: Path, *, nodes: range, rounds: int) -> None:
    """run.json's round timing against each node's last logged record of every round, recomputed here."""
    logs = [read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME) for v in nodes]
    origin = min(log.header.started_unix for log in logs)
    done: dict[int, list[float]] = {}  # round -> each node's last record of it
    for log in logs:
        last: dict[int, float] = {}
        for record in log.records:
            kind = record.WhichOneof("kind")
            if kind in ("sent", "received", "drop_out"):
                t = getattr(record, kind).round
                last[t] = max(last.get(t, 0.0), record.logged_unix)
        for t, when in last.items():
            done.setdefault(t, []).append(when)
    assert [row["round"] for row in timing["rounds"]] == sorted(done) == list(range(rounds))
    previous = origin
    for row in timing["rounds"]:
        times = done[row["round"]]
        assert row["nodes"] == len(times)
        assert row["first_s"] == pytest.approx(min(times) - origin, abs=1e-6)
        assert row["median_s"] == pytest.approx(float(np.median(times)) - origin, abs=1e-6)
        assert row["last_s"] == pytest.approx(max(times) - origin, abs=1e-6)
        assert row["wall_s"] == pytest.approx(max(times) - previous, abs=1e-6) and row["wall_s"] > 0
        previous = max(times)


def comparable(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
    """The record without its timing fields."""
    copy = viewlog_pb2.Record()
    copy.CopyFrom(record)
    copy.ClearField("logged_unix")
    if copy.WhichOneof("kind") == "header":
        copy.header.ClearField("started_unix")
    return copy


def message_key(record: viewlog_pb2.Record) -> tuple:
    """What identifies a record of synchronous gossip whatever the timing: kind, message id, peer, fate."""
    kind = record.WhichOneof("kind")
    body = getattr(record, kind)
    if kind in ("sent", "received"):
        fate = (body.delivered, body.failure) if kind == "sent" else ()
        return (kind, body.kind, body.round, body.sequence, body.exchange_id, body.peer, *fate)
    if kind == "final_output":
        return (kind, body.rounds_completed)
    return (kind, comparable(record).SerializeToString(deterministic=True))


def payload(record: viewlog_pb2.Record) -> np.ndarray:
    kind = record.WhichOneof("kind")
    body = getattr(record, kind)
    return from_tensor(body.value if kind == "final_output" else body.payload)


@pytest.mark.cluster
def test_virtual_and_networked_runs_with_one_seed_log_the_same_records(make_cluster_files):
    """Same topology, data and master seed: same noise, same messages, same payloads.

    What timing decides is left out: when a record was logged, the order of a round's records
    (whose value arrives first) and so the order of the floating-point sum of a round's values, which
    moves later rounds' payloads in their last bits; round 0's payloads (input plus noise) are exact.
    """
    files = make_cluster_files("hypercube", 8, sigma=0.5, rounds=5, dimension=3, round_deadline_s=10.0,
                               name="virtual-vs-networked")
    options = LaunchOptions(sampler="simulation", simulation_seed=13)
    virtual = run_virtual(files.topology_path, files.data_dir, files.root / "virtual", options)
    networked = run_cluster(files.topology_path, files.data_dir, files.root / "networked", options)
    assert virtual.ok and networked.ok

    for v in range(8):
        private = [read_log(node_log_dir(run.rundir, v) / PRIVATE_LOG_NAME) for run in (virtual, networked)]
        ours, theirs = ([comparable(record) for record in log.records] for log in private)
        assert ours == theirs and ours  # same input, same noise draw, bit for bit
        views = [read_log(node_log_dir(run.rundir, v) / VIEW_LOG_NAME) for run in (virtual, networked)]
        assert views[0].damage is None and views[1].damage is None
        assert comparable(views[0].records[0]) == comparable(views[1].records[0])  # headers: every field
        assert views[0].records[0].header.sampler_kind == "simulation"
        assert not views[1].of_kind("drop_out")
        by_key = [sorted(view.records[1:], key=message_key) for view in views]
        assert [message_key(r) for r in by_key[0]] == [message_key(r) for r in by_key[1]]
        for ours, theirs in zip(*by_key):
            if ours.WhichOneof("kind") in ("sent", "received", "final_output"):
                if ours.WhichOneof("kind") != "final_output" and getattr(ours, ours.WhichOneof("kind")).round == 0:
                    assert np.array_equal(payload(ours), payload(theirs))
                np.testing.assert_allclose(payload(ours), payload(theirs), rtol=1e-12, atol=1e-14)
    summaries = [json.loads((run.rundir / "run.json").read_text()) for run in (virtual, networked)]
    timings = [summary.pop("round_timing") for summary in summaries]  # when things happened differs, not what
    assert summaries[0] == summaries[1]
    for run, timing in zip((virtual, networked), timings):
        assert_round_timing_matches_the_logs(timing, run.rundir, nodes=range(8), rounds=5)


def test_process_options_are_refused_by_a_virtual_run(make_cluster_files, capsys):
    files = make_cluster_files("ring", 4, rounds=2, name="virtual-refused")
    base = ["run", str(files.topology_path), "--data", str(files.data_dir), "--out", str(files.root / "r"),
            "--virtual"]
    for extra, named in ((["--kill", "1@1"], "--kill"), (["--certs", str(files.root)], "--certs")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and named in err and "--virtual" in err
        assert not (files.root / "r").exists()


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


@pytest.mark.timeout(30)
def test_a_virtual_run_of_600_nodes_fits_in_256_open_files(tmp_path):
    """Two logs per node would need 1200 descriptors; the shared pool keeps the run within 256."""
    n = 600
    topology = build_topology(generate("ring", n=n), graph_name="ring", run_id="virtual-600",
                              protocol=MuffliatoParams(sigma=0.0, sensitivity=1.0, alpha=2.0, rounds=2,
                                                       accelerated=False, dimension=1),
                              addresses=[f"127.0.0.1:{20000 + v}" for v in range(n)])
    save_topology(topology, tmp_path / "topology.json")
    write_node_files(synthetic_values(n, 1, 1.0, 3), tmp_path / "data")
    rundir = tmp_path / "run"
    command = [sys.executable, "-m", "coordinator_tools.cli", "run", str(tmp_path / "topology.json"),
               "--data", str(tmp_path / "data"), "--out", str(rundir), "--virtual"]
    done = subprocess.run(command, cwd=REPO, preexec_fn=_limit_open_files, capture_output=True, text=True,
                          timeout=28, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(rundir.glob("node-*/estimate.json"))) == n


def test_virtual_nodes_keep_the_published_deadlines_stretched_by_their_share_of_the_loop():
    """n nodes take turns on one loop: a neighbour's value is late by the others' work, not by the network."""
    def topology(n: int):
        return build_topology(generate("ring", n=n), graph_name="ring", run_id=f"stretch-{n}",
                              protocol=MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=2, dimension=1),
                              addresses=[f"127.0.0.1:{20000 + v}" for v in range(n)])

    small, large = topology(16), topology(1024)
    assert virtual_network(small) == small.network
    stretched = virtual_network(large)
    assert stretched.round_deadline_s == pytest.approx(16 * large.network.round_deadline_s)
    assert stretched.startup_deadline_s == pytest.approx(16 * large.network.startup_deadline_s)
    assert (stretched.send_attempts, stretched.max_message_bytes) == (large.network.send_attempts,
                                                                      large.network.max_message_bytes)
