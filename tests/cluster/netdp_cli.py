"""Driving `netdp` itself from a cluster test: one command at a time, and a mutual-TLS run on loopback.

Shared by the tests that run a protocol end to end through the command line, as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator_tools.cluster.ports import free_loopback_ports

BIN = Path(sys.executable).parent


def netdp(cwd: Path, *argv: str) -> str:
    """Run one `netdp` command; its output, or the test fails with its last lines."""
    done = subprocess.run([str(BIN / "netdp"), *argv], cwd=cwd, capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        pytest.fail(f"netdp {' '.join(argv)} exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")
    return done.stdout + done.stderr


def mutual_tls_run(cwd: Path, *generate: str, canaries: int = 16) -> dict[str, object]:
    """`topology generate GENERATE... --out t.json` on free loopback ports, certificates, data, then `netdp run` with
    canaries into cwd/r; returns the published topology."""
    netdp(cwd, "topology", "generate", *generate, "--out", "t.json")
    published = json.loads((cwd / "t.json").read_text())
    for node, port in zip(published["nodes"], free_loopback_ports(len(published["nodes"]))):
        node["address"] = f"127.0.0.1:{port}"
    (cwd / "t.json").write_text(json.dumps(published))
    netdp(cwd, "certs", "t.json", "--out", "certs")
    netdp(cwd, "data", "generate", "t.json", "--out", "data")
    netdp(cwd, "run", "t.json", "--data", "data", "--out", "r", "--certs", "certs", "--canaries", str(canaries))
    published_run: dict[str, object] = published
    return published_run
