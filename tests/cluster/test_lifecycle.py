"""A local run behaves as an operator expects: SIGTERM stops it as Ctrl-C does, and a port in use is named
before anything starts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from coordinator_tools.cluster.launch import RUN_SUMMARY_FILE, node_log_dir
from coordinator_tools.cluster.ports import check_ports_free
from node.viewlog import VIEW_LOG_NAME

BIN = Path(sys.executable).parent


def node_processes_of(rundir: Path) -> list[int]:
    """Pids of live processes whose command line names `rundir` (the run's node processes)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "node.cli" in command and str(rundir) in command:
                pids.append(int(entry.name))
    return pids


def test_sigterm_stops_the_nodes_and_writes_run_json(make_cluster_files):
    files = make_cluster_files("ring", n=4, rounds=100_000, round_deadline_s=5.0)
    rundir = files.root / "run"
    run = subprocess.Popen([str(BIN / "netdp"), "run", str(files.topology_path), "--data", str(files.data_dir),
                            "--out", str(rundir), "--insecure", "--sampler", "simulation", "--seed", "3"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not all((node_log_dir(rundir, v) / VIEW_LOG_NAME).exists() for v in range(4)):  # every node is up
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read() if run.stderr else ""
            time.sleep(0.2)
        assert len(node_processes_of(rundir)) == 4
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=30)
    finally:  # a failed check leaves no run behind
        if run.poll() is None:
            run.kill()
            run.wait()
            for pid in node_processes_of(rundir):
                os.kill(pid, signal.SIGKILL)
    assert run.returncode == 130 and "interrupted" in err, err
    summary = json.loads((rundir / RUN_SUMMARY_FILE).read_text())
    assert summary["interrupted"] is True and len(summary["nodes"]) == 4
    assert node_processes_of(rundir) == []
    check_ports_free(files.topology.address_of(v) for v in range(4))  # no node holds its port any more


def test_a_port_in_use_is_named_before_anything_starts(make_cluster_files):
    files = make_cluster_files("ring", n=4, rounds=2)
    taken = int(files.topology.address_of(2).rpartition(":")[2])
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        started = time.monotonic()
        result = subprocess.run([str(BIN / "netdp"), "run", str(files.topology_path), "--data", str(files.data_dir),
                                 "--out", str(files.root / "run"), "--insecure"],
                                capture_output=True, text=True, timeout=60, env={**os.environ})
    assert time.monotonic() - started < 20
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"127.0.0.1:{taken}" in result.stderr and "in use" in result.stderr
    assert not (files.root / "run" / "node-0").exists()
