"""`netdp plan` called as the command line calls it, for the tests that read its document."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coordinator_tools.audit import plan_command
from node.topology import Topology, save_topology


def run_plan(tmp_path: Path, topology: Topology, *argv: str) -> tuple[int, dict]:
    """Save the topology, run `netdp plan` on it with `argv`; its exit code and plan.json."""
    save_topology(topology, tmp_path / "topology.json")
    parser = argparse.ArgumentParser()
    plan_command.register(parser.add_subparsers())
    args = parser.parse_args(["plan", str(tmp_path / "topology.json"), "--out", str(tmp_path / "plan.json"), *argv])
    return args.handler(args), json.loads((tmp_path / "plan.json").read_text())
