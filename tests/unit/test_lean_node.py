"""A one-id node process imports only what it runs: no graph, sparse-matrix or data-frame library."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx

from coordinator_tools.topology.build import build_topology
from node.protocols.muffliato import MuffliatoParams
from node.topology import save_topology

HEAVY = ("scipy", "networkx", "pandas", "pyarrow", "polars", "matplotlib", "sklearn", "rich")
# What a node process imports to run: its entry point, its runtime, its topology read back and checked (every
# protocol's plugin included), and its secure noise sampler drawing once.
NODE_START = """
import json, sys
from pathlib import Path
import numpy as np
import node.cli, node.runtime
from node.noise import make_samplers
from node.protocols.registry import protocol_plugin
from node.topology import load_topology
topology = load_topology(Path(sys.argv[1]))
protocol_plugin(topology.protocol_name)
make_samplers("secure", None).gaussian.perturb(np.zeros(3), 1.0)
print(json.dumps(sorted({name.partition(".")[0] for name in sys.modules})))
"""


def test_a_node_process_imports_no_heavy_library(tmp_path: Path) -> None:
    topology = build_topology(nx.cycle_graph(3), graph_name="ring", run_id="lean",
                              protocol=MuffliatoParams(sigma=1.0, sensitivity=1.0, alpha=2.0, rounds=2, dimension=4))
    save_topology(topology, tmp_path / "topology.json")
    result = subprocess.run([sys.executable, "-c", NODE_START, str(tmp_path / "topology.json")],
                            capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(result.stdout))
    assert {"node", "grpc", "opendp"} <= loaded
    assert sorted(loaded & set(HEAVY)) == []
