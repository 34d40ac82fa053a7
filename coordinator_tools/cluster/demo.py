"""`netdp demo`: the whole pipeline on embedded defaults, on real processes.

Generates a topology for the chosen protocol (synchronous Muffliato by default, randomized
Muffliato, or Muffliato-GD) and its data (synthetic vectors, or the breast-cancer data split
across the nodes), calibrates an averaging demo's σ with the planner for a target mean ε,
issues TLS certificates, runs one node process per address on loopback (the default demo:
128 node ids as 8 processes of 16), audits the logs (`netdp audit`, with the data folder for a
learning run's utility), prints what the run computed against what it should have and where
the network amplified privacy, and points at the report page. What differs per protocol lives
in `demo_protocols`. The layout of DIR is the same for every protocol:
topology.json, data/, run/node-<id>/, audit/report.json and audit/index.html.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from coordinator_tools.arguments import flag_names
from coordinator_tools.audit.command import print_summary
from coordinator_tools.audit.html import PAGE_FILE
from coordinator_tools.audit.run_audit import audit_report
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.command import (
    CONSOLE,
    add_launch_arguments,
    launch_with_progress,
    options_from_args,
    report_failures,
)
from coordinator_tools.cluster.demo_protocols import (
    AveragingDemo,
    DemoProtocol,
    LearningDemo,
    MuffliatoDemo,
    PersonalizedDemo,
    demo_protocols,
)
from coordinator_tools.cluster.launch import TOPOLOGY_FILE
from coordinator_tools.experiment import add_experiment_argument
from coordinator_tools.topology.generators import GENERATORS
from node.errors import ConfigError
from node.schema import config_errors
from node.topology import NetworkParams, Topology, save_topology

CERT_VALIDITY_DAYS = 7
DEFAULT_NODES = 16


def demo_topology(args: argparse.Namespace, protocol: DemoProtocol) -> Topology:
    """Topology of the chosen protocol on free loopback ports."""
    return protocol.topology(args, NetworkParams(round_deadline_s=5.0, startup_deadline_s=60.0))


def check_demo_flags(args: argparse.Namespace, protocol: DemoProtocol) -> None:
    """--target-eps (> 0) calibrates an averaging demo's σ, --rounds (>= 1) the gossip rounds T of a demo that has them
    (synchronous Muffliato, DECOR)."""
    for flag, value, applies, least in (("--target-eps", args.target_eps, isinstance(protocol, AveragingDemo), 0.0),
                                        ("--rounds", args.rounds, protocol.takes_rounds, 0)):
        if value is not None and not applies:
            raise ConfigError(f"{flag} does not apply to the {args.protocol} demo")
        if value is not None and not value > least:
            raise ConfigError(f"{flag} must be greater than {least:g}, got {value:g}")


def resolve_defaults(args: argparse.Namespace) -> DemoProtocol:
    """The chosen protocol, with its defaults filled into args where the command line left them out.

    args.sigma stays None for an averaging demo: its topology calibrates it.
    """
    protocol = demo_protocols()[args.protocol]
    check_demo_flags(args, protocol)
    if args.sigma is None:
        args.sigma = protocol.sigma
    args.graph = args.graph or protocol.graph
    if args.n is None and (args.graph is None or "n" in GENERATORS[args.graph].parameters):
        args.n = protocol.nodes or DEFAULT_NODES
    return protocol


def claim_new_folder(out: Path) -> Path:
    """`out`, made now or found empty, claimed by creating its topology.json exclusively.

    A demo never writes into a folder that holds anything: another run's files stay as they were,
    and of two demos started on one folder the second is refused.
    """
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: the demo writes a new folder (give another --out, or remove it)")
    try:
        (out / TOPOLOGY_FILE).open("x").close()
    except FileExistsError:
        raise ConfigError(f"{out} is being written by another command") from None
    return out


def _demo_command(args: argparse.Namespace) -> int:
    protocol = resolve_defaults(args)
    with config_errors(flag_names(args)):
        topology = demo_topology(args, protocol)
    out = args.out = claim_new_folder(args.out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S"))
    save_topology(topology, out / TOPOLOGY_FILE)
    with config_errors(flag_names(args)):
        protocol.write_data(topology, out / "data", args)
    if not args.insecure and args.certs is None:
        args.certs = out / "certs"
        write_cluster_certs(topology, args.certs, CERT_VALIDITY_DAYS)
    processes = len(set(node.address for node in topology.nodes))
    CONSOLE.print(f"running {topology.n} nodes as {processes} node process{'es' if processes > 1 else ''} on "
                  f"loopback ({'mutual TLS' if args.certs else 'PLAIN TEXT'}, {args.sampler} sampler)")
    result = launch_with_progress(out / TOPOLOGY_FILE, out / "data", out / "run", options_from_args(args))
    report_failures(result)
    CONSOLE.print(f"view logs: {result.rundir}/node-<id>/view.log (private inputs and noise: private.log)")
    CONSOLE.print("auditing the view logs: pairwise privacy loss (paper bound, exact, attack) ...")
    report = audit_report(result.rundir, out / "audit", protocol.audit_options(out / "data"))
    protocol.print_utility(result, out / "data", report.document)
    protocol.print_privacy(topology, out / "audit", report.document)
    print_summary(report, out / "audit" / PAGE_FILE, CONSOLE)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run a local cluster on embedded defaults and show the result")
    demo.add_argument("--protocol", choices=tuple(demo_protocols()), default="muffliato",
                      help="protocol to run (default muffliato: synchronous gossip; muffliato-async: randomized "
                           f"pairwise gossip; muffliato-gd: private SGD on the {LearningDemo.dataset} data, "
                           "then the audit page with its utility; rw-sgd: random-walk DP-SGD on the same data; "
                           "personalized-cd: personalized private CD on the AISTATS 2018 synthetic task, "
                           f"{PersonalizedDemo.nodes} agents)")
    demo.add_argument("--out", type=Path, default=None, help="new folder for everything (default runs/demo-<time>)")
    demo.add_argument("--graph", default=None, choices=("hypercube", "ring", "complete", "torus", "grid",
                                                         "exponential", "star", "davis_southern_women", "karate_club",
                                                         "florentine_families"),
                      help="deterministic graph kind (default hypercube; rw-sgd: davis_southern_women, 32 nodes; "
                           "personalized-cd: its agents' similarity graph, no choice)")
    demo.add_argument("--n", type=int, default=None,
                      help=f"number of nodes (default {MuffliatoDemo.nodes}, other protocols {DEFAULT_NODES}; "
                           "a named graph fixes it)")
    demo.add_argument("--ids-per-process", type=int, default=None, metavar="K",
                      help=f"node ids hosted by each node process (default: muffliato spreads the nodes over at most "
                           f"{MuffliatoDemo.processes} processes, {MuffliatoDemo.nodes // MuffliatoDemo.processes} ids "
                           "each by default; the other protocols run one process per node)")
    demo.add_argument("--rounds", type=int, default=None,
                      help=f"muffliato: gossip rounds T (default {MuffliatoDemo.rounds}: each observer then receives "
                           "T*deg values, well below the n - 1 unknown inputs); decor: all rounds, the first noisy "
                           "(default: enough to mix the pairwise terms out)")
    demo.add_argument("--dimension", type=int, default=None,
                      help=f"averaging: length of each node's vector (default {MuffliatoDemo.dimension}, "
                           f"muffliato-async {AveragingDemo.dimension}); "
                           f"personalized-cd: features of the task (default {PersonalizedDemo.dimension})")
    demo.add_argument("--sigma", type=float, default=None,
                      help="noise std: each node's once (averaging, default: calibrated by the planner for "
                           f"--target-eps) or every gradient step's (muffliato-gd, default {LearningDemo.sigma:g}); "
                           "given, it wins over the calibration")
    demo.add_argument("--target-eps", type=float, default=None, metavar="EPS",
                      help=f"averaging: the mean exact eps at delta {AveragingDemo.delta:g} (Muffliato's rule: worst "
                           "observer's mean over the nodes) that the planner calibrates sigma for (default "
                           f"{AveragingDemo.target_eps:g})")
    demo.add_argument("--sensitivity", type=float, default=None,
                      help=f"averaging: l2 sensitivity, inputs clipped to half of it (default "
                           f"{AveragingDemo.sensitivity:g})")
    demo.add_argument("--epsilon", type=float, default=None,
                      help=f"personalized-cd: every agent's budget epsilon (default {PersonalizedDemo.epsilon:g})")
    demo.add_argument("--alpha", type=float, default=2.0, help="Renyi order for the audit (default 2)")
    demo.add_argument("--data-seed", type=int, default=None,
                      help="seed of the synthetic data, or of the learning data's split (personalized-cd: of the "
                           f"task, default {PersonalizedDemo.data_seed})")
    add_launch_arguments(demo)
    add_experiment_argument(demo)
    demo.set_defaults(handler=_demo_command)
