"""Utility vs the physical limit: synchronous Muffliato's measured error against Thm 2 and central DP.

On each graph (hypercube, Erdős–Rényi, grid, ring) a virtual run of accelerated Muffliato
stops at Thm 2's T_stop for its inputs. Its error is the nodes' mean squared distance to the
true mean, per coordinate, compared with
* Thm 2's bound on it (`coordinator_tools.theory.muffliato_mse_bound`), and
* the central-DP optimum at the same mean privacy loss: a trusted aggregator releasing the mean
  with Gaussian noise has error αΔ²/(2n²ε̄) at RDP ε̄ (Muffliato §2.2), where ε̄ is the run's
  exact mean loss, max over observers v of (1/n) Σ_u ε_{u→v}, from `netdp plan`.
The second ratio is Muffliato Table 1's story: close to 1 on expanders (hypercube,
Erdős–Rényi), growing with n on the grid and the ring.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.figures import Row, Sizes
from bench.isolate import Measured
from bench.virtual import virtual_run
from coordinator_tools.cluster.launch import LaunchOptions
from coordinator_tools.dataprep.datasets import synthetic_values, write_node_files
from coordinator_tools.theory import muffliato_mse_bound, muffliato_t_stop
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato import MuffliatoParams
from node.topology import NetworkParams, Topology

GRAPHS = ("hypercube", "erdos_renyi", "grid", "ring")
SIGMA, SENSITIVITY, ALPHA, DIMENSION = 1.0, 1.0, 2.0, 16
NETDP = Path(sys.executable).with_name("netdp")


def muffliato_on(graph: str, n: int, rounds: int) -> Topology:
    """Accelerated Muffliato on the n-node `graph` (seed 1 where random), deadlines far beyond a round."""
    return build_topology(generate(graph, n=n, seed=1 if graph == "erdos_renyi" else None), graph_name=graph,
                          run_id=f"bench-utility-{graph}-{n}",
                          protocol=MuffliatoParams(sigma=SIGMA, sensitivity=SENSITIVITY, alpha=ALPHA, rounds=rounds,
                                                   accelerated=True, dimension=DIMENSION),
                          addresses=[f"127.0.0.1:{20000 + v}" for v in range(n)],
                          network=NetworkParams(round_deadline_s=600.0, startup_deadline_s=600.0))


def mean_loss_rdp(topology_file: Path, out: Path) -> float:
    """ε̄ of the planned run: max over observers of the mean exact RDP loss, as `netdp plan` reports it."""
    subprocess.run([str(NETDP), "plan", str(topology_file), "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return float(json.loads(out.read_text())["summary"]["max_mean_rdp"]["exact"]["rdp"])


def measure(graph: str, n: int) -> dict:
    """One run at T_stop: measured MSE per coordinate, Thm 2's bound, ε̄ and the central optimum at ε̄."""
    values = synthetic_values(n, DIMENSION, SENSITIVITY, 2)
    mean = values.mean(axis=0)
    spread = float(np.mean(np.sum((values - mean) ** 2, axis=1)))
    gap = muffliato_on(graph, n, 1).spectral_gap
    topology = muffliato_on(graph, n, muffliato_t_stop(n, gap, SIGMA, spread, accelerated=True))
    with tempfile.TemporaryDirectory(prefix=f"netdp-bench-utility-{graph}-") as folder:
        root = Path(folder)
        write_node_files(values, root / "data")
        result, wall = virtual_run(topology, root, "run", LaunchOptions(sampler="simulation", simulation_seed=0))
        estimates = np.array([result.estimates()[v] for v in range(n)])
        epsilon = mean_loss_rdp(root / "topology.json", root / "plan.json")
    mse = float(np.mean((estimates - mean) ** 2))
    return {"rounds": topology.protocol.rounds, "spectral_gap": gap, "degree_max": max(map(len, topology.neighbours)),
            "run_wall_s": wall, "mse": mse, "thm2_bound": muffliato_mse_bound(n, SIGMA), "mean_rdp": epsilon,
            "central_mse_at_mean_rdp": ALPHA * SENSITIVITY**2 / (2 * n * n * epsilon)}


def cases(sizes: Sizes) -> list[dict]:
    return [{"graph": graph, "n": sizes.utility_n} for graph in GRAPHS]


def rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    table = []
    for params, m in done:
        f = m.figures
        figure = f"MSE, {params['graph']} n={params['n']}, T={f['rounds']}"
        table.append(Row(figure, f"{f['mse']:.2e}", f"Thm 2 bound 3σ²/n {f['thm2_bound']:.2e}",
                         f["mse"] / f["thm2_bound"], "≤ 1×"))
        table.append(Row(figure, f"{f['mse']:.2e}",
                         f"central DP at ε̄={f['mean_rdp']:.3f} {f['central_mse_at_mean_rdp']:.2e}",
                         f["mse"] / f["central_mse_at_mean_rdp"]))
    return table
