"""`netdp demo`: the whole pipeline on embedded defaults, on real processes.

Generates a topology for the chosen protocol (synchronous Muffliato by default, or
randomized Muffliato) and synthetic data, issues TLS certificates, runs one node process
per peer on loopback, compares the estimates with the true mean (and Muffliato's Thm 2
bound for synchronous gossip), then audits the logs (`netdp audit`) and points at the
report page. The layout of DIR is the same for every protocol: topology.json, data/,
run/node-<id>/, audit/report.json and audit/index.html.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import numpy as np
from rich.table import Table

from coordinator_tools.audit.command import audit_run, print_summary
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.command import CONSOLE, add_launch_arguments, launch_with_progress, options_from_args, \
    report_failures
from coordinator_tools.cluster.launch import ClusterResult
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.datasets import synthetic_values, write_node_files
from coordinator_tools.theory import muffliato_mse_bound, muffliato_t_stop, worst_case_spread
from coordinator_tools.topology.build import build_topology, gossip_mixing, new_run_id
from coordinator_tools.topology.generators import generate
from node.protocols.muffliato_async import MuffliatoAsyncParams
from node.topology import MuffliatoParams, NetworkParams, ProtocolParams, Topology, save_topology

CERT_VALIDITY_DAYS = 7
ASYNC_EXCHANGES = 40  # ticks per node of the randomized demo
ASYNC_TICK_RATE = 20.0


def muffliato_demo_params(args: argparse.Namespace, graph: nx.Graph) -> MuffliatoParams:
    """Synchronous Muffliato with T = T_stop for the worst-case data spread."""
    gap = gossip_mixing(graph, "metropolis").spectral_gap
    rounds = muffliato_t_stop(graph.number_of_nodes(), gap, args.sigma, worst_case_spread(args.sensitivity))
    return MuffliatoParams(sigma=args.sigma, sensitivity=args.sensitivity, alpha=args.alpha, rounds=rounds,
                           dimension=args.dimension)


def async_demo_params(args: argparse.Namespace, graph: nx.Graph) -> MuffliatoAsyncParams:
    """Randomized Muffliato: a fixed number of ticks per node at a brisk clock rate."""
    return MuffliatoAsyncParams(sigma=args.sigma, sensitivity=args.sensitivity, alpha=args.alpha,
                                dimension=args.dimension, exchanges=ASYNC_EXCHANGES, tick_rate=ASYNC_TICK_RATE)


DEMO_PROTOCOLS: dict[str, Callable[[argparse.Namespace, nx.Graph], ProtocolParams]] = {
    "muffliato": muffliato_demo_params,
    "muffliato-async": async_demo_params,
}


def demo_topology(args: argparse.Namespace) -> Topology:
    """Topology of the chosen protocol on free loopback ports."""
    graph = generate(args.graph, n=args.n)
    params = DEMO_PROTOCOLS[args.protocol](args, graph)
    return build_topology(graph, graph_name=args.graph, run_id=new_run_id(f"demo-{args.graph}"), protocol=params,
                          addresses=[f"127.0.0.1:{port}" for port in free_loopback_ports(graph.number_of_nodes())],
                          network=NetworkParams(round_deadline_s=5.0, startup_deadline_s=60.0))


def print_utility(result: ClusterResult, values: np.ndarray) -> None:
    """True mean, every node's estimate, and the MSE next to Thm 2's bound."""
    topology = result.topology
    true_mean = values.mean(axis=0)
    estimates = result.estimates()
    table = Table(title=f"{topology.n} nodes, {topology.graph}, {topology.protocol.name}, "
                        f"sigma = {topology.protocol.sigma:g}")
    table.add_column("node", justify="right")
    table.add_column("estimate (first coordinates)")
    table.add_column("squared error / D", justify="right")
    shown = min(3, topology.protocol.dimension)
    table.add_row("true mean", np.array2string(true_mean[:shown], precision=4), "")
    errors = []
    for node_id, estimate in sorted(estimates.items()):
        error = float(np.mean((estimate - true_mean) ** 2))
        errors.append(error)
        table.add_row(str(node_id), np.array2string(estimate[:shown], precision=4), f"{error:.3e}")
    CONSOLE.print(table)
    mse = float(np.mean(errors))
    if topology.protocol.name != "muffliato":
        CONSOLE.print(f"mean squared error per coordinate {mse:.3e}")
        return
    bound = muffliato_mse_bound(topology.n, topology.protocol.sigma)
    verdict = "[green]within[/green]" if mse <= bound else "[red]above[/red]"
    CONSOLE.print(f"mean squared error per coordinate {mse:.3e}, {verdict} Muffliato Thm 2's bound "
                  f"3 sigma^2 / n = {bound:.3e}")


def _demo_command(args: argparse.Namespace) -> int:
    out = args.out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    topology = demo_topology(args)
    save_topology(topology, out / "topology.json")
    values = synthetic_values(topology.n, topology.protocol.dimension, topology.protocol.sensitivity, args.data_seed)
    write_node_files(values, out / "data")
    if not args.insecure and args.certs is None:
        args.certs = out / "certs"
        write_cluster_certs(topology, args.certs, CERT_VALIDITY_DAYS)
    CONSOLE.print(f"running {topology.n} node processes on loopback "
                  f"({'mutual TLS' if args.certs else 'PLAIN TEXT'}, {args.sampler} sampler)")
    result = launch_with_progress(out / "topology.json", out / "data", out / "run", options_from_args(args))
    report_failures(result)
    print_utility(result, values)
    CONSOLE.print(f"view logs: {result.rundir}/node-<id>/view.log (private inputs and noise: private.log)")
    CONSOLE.print("auditing the view logs: pairwise privacy loss (paper bound, exact, attack) ...")
    report = audit_run(result.rundir, out / "audit")
    print_summary(report, out / "audit" / "index.html", CONSOLE)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run a local cluster on embedded defaults and show the result")
    demo.add_argument("--protocol", choices=tuple(DEMO_PROTOCOLS), default="muffliato",
                      help="protocol to run (default muffliato: synchronous gossip; muffliato-async: randomized "
                           "pairwise gossip)")
    demo.add_argument("--out", type=Path, default=None, help="new folder for everything (default runs/demo-<time>)")
    demo.add_argument("--graph", default="hypercube", choices=("hypercube", "ring", "complete", "torus", "grid",
                                                                "exponential", "star"),
                      help="deterministic graph kind (default hypercube)")
    demo.add_argument("--n", type=int, default=16, help="number of nodes (default 16)")
    demo.add_argument("--dimension", type=int, default=4, help="length of each node's vector (default 4)")
    demo.add_argument("--sigma", type=float, default=0.5, help="noise std each node adds once (default 0.5)")
    demo.add_argument("--sensitivity", type=float, default=1.0, help="l2 sensitivity; inputs clipped to half of it")
    demo.add_argument("--alpha", type=float, default=2.0, help="Renyi order for the audit (default 2)")
    demo.add_argument("--data-seed", type=int, default=None, help="seed of the synthetic data")
    add_launch_arguments(demo)
    demo.set_defaults(handler=_demo_command)
