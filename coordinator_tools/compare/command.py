"""`netdp compare`: calibrate σ for both protocols, run both for real, audit both, compare.

DIR holds data/ (the one split both runs learn from), muffliato-gd/ and rw-sgd/ (each with
topology.json, certs/, run/ and audit/), comparison.json, loss_vs_hops.png and accuracy.png.
"""

from __future__ import annotations

import argparse
import secrets
import time
from dataclasses import replace
from pathlib import Path

from rich.table import Table

from coordinator_tools.arguments import count, flag_names, positive
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.command import CONSOLE, launch_with_progress, report_failures
from coordinator_tools.cluster.launch import LaunchOptions
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.compare import figures
from coordinator_tools.compare.calibrate import Calibration, calibrate
from coordinator_tools.compare.results import comparison, protocol_result, write_comparison
from coordinator_tools.compare.setup import GOSSIP, GOSSIP_ALPHA, PROTOCOLS, WALK, CompareSetup, comparison_topology
from coordinator_tools.dataprep.datasets import SEED_BITS
from coordinator_tools.dataprep.learning_data import write_minibatch_split
from coordinator_tools.experiment import add_experiment_argument
from coordinator_tools.topology.build import new_run_id
from coordinator_tools.topology.generators import GENERATORS
from node.errors import ConfigError
from node.schema import config_errors
from node.topology import Topology, save_topology

CERT_VALIDITY_DAYS = 7
DATASETS = ("breast_cancer", "digits")  # the bundled classification sets (logistic regression)


def write_data(setup: CompareSetup, topology: Topology, data_dir: Path, seed: int) -> None:
    """The split `netdp data split DATASET` makes (iid); every node needs a whole minibatch."""
    write_minibatch_split(setup.dataset, setup.batch, topology, data_dir, seed)


def run_protocol(setup: CompareSetup, calibration: Calibration, folder: Path, data_dir: Path,
                 launch: LaunchOptions, *, secure: bool) -> dict[str, object]:
    """Publish, run (a real cluster, mutual TLS when `secure`) and audit one protocol at its σ; return the report."""
    graph = setup.make_graph()
    params = setup.params(calibration.protocol, calibration.sigma, calibration.alpha, graph.number_of_nodes())
    topology = comparison_topology(setup, graph, params, run_id=new_run_id(f"compare-{calibration.protocol}"),
                                   addresses=[f"127.0.0.1:{p}" for p in free_loopback_ports(graph.number_of_nodes())])
    save_topology(topology, folder / "topology.json")
    if secure:
        launch = replace(launch, certs_dir=folder / "certs")
        write_cluster_certs(topology, folder / "certs", CERT_VALIDITY_DAYS)
    CONSOLE.print(f"{calibration.protocol}: {topology.n} node processes, sigma = {calibration.sigma:.4g}, "
                  f"{'mutual TLS' if launch.certs_dir else 'PLAIN TEXT'}")
    result = launch_with_progress(folder / "topology.json", data_dir, folder / "run", launch)
    report_failures(result)
    return audit_run(result.rundir, folder / "audit", AuditOptions(data=data_dir, delta=setup.delta))


def print_tables(document: dict[str, object]) -> None:
    """The comparison as two rich tables: one column per protocol, and mean ε per hop distance."""
    target, protocols = document["target"], document["protocols"]
    table = Table(title=f"{document['graph']}, n = {document['n']}, {document['dataset']}: target mean eps "
                        f"{target['mean_eps']:g} at delta = {target['delta']:g}")
    table.add_column("")
    for name in protocols:
        table.add_column(name, justify="right")
    rows = {
        "sigma (sigma/Delta)": lambda e: f"{e['sigma']:.4g} ({e['noise_multiplier']:.3g})",
        "Renyi order": lambda e: "exact Gaussian" if e["calibration"]["column"] ==
        "exact_eps_upper" else f"{e['alpha']:g}",
        "plan evaluations": lambda e: str(e["calibration"]["plan_evaluations"]),
        "planned mean eps": lambda e: f"{e['planned_mean_eps']:.4g} ({e['calibration']['column']})",
        "audited mean eps": lambda e: ", ".join(f"{k} {v:.3g}" for k, v in e["realized_mean_eps"].items()),
        "local DP eps": lambda e: f"{e['ldp_eps']:.3g}",
        "test accuracy: run": lambda e: f"{e['accuracy']['run']:.3f}",
        "trusted curator": lambda e: f"{e['accuracy']['trusted_curator']:.3f}",
        "nodes alone (local)": lambda e: f"{e['accuracy']['local']:.3f}",
    }
    for label, cell in rows.items():
        table.add_row(label, *(cell(entry) for entry in protocols.values()))
    CONSOLE.print(table)
    hops = Table(title="mean pairwise eps by hop distance")
    hops.add_column("column")
    columns = {f"{name}: {column}": values for name, entry in protocols.items()
               for column, values in entry["mean_eps_per_hop"].items()}
    distances = sorted({int(h) for values in columns.values() for h in values})
    for distance in distances:
        hops.add_column(f"{distance} hop{'s' if distance > 1 else ''}", justify="right")
    for label, values in columns.items():
        hops.add_row(label, *(f"{values[str(d)]:.3g}" if str(d) in values else "" for d in distances))
    CONSOLE.print(hops)


def _compare_command(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if args.seed is not None and args.sampler != "simulation":
        raise ConfigError("--seed only goes with --sampler simulation")
    n = args.n if "n" in GENERATORS[args.graph].parameters else None
    flags = flag_names(args)
    with config_errors(flags):  # a bad flag is refused in one line, before any calibration or run
        setup = CompareSetup(graph=args.graph, n=n, graph_seed=args.graph_seed, dataset=args.dataset,
                             steps_per_node=args.steps_per_node, gossip_rounds=args.gossip_rounds, clip=args.clip,
                             batch=args.batch, gossip_learning_rate=args.learning_rate,
                             walk_learning_rate=args.walk_learning_rate)
        graph = setup.make_graph()
    for protocol, rate in ((GOSSIP, "learning_rate"), (WALK, "walk_learning_rate")):
        with config_errors({**flags, "learning_rate": flags[rate]}):  # its parameters at a valid σ
            setup.params(protocol, 1.0, GOSSIP_ALPHA, graph.number_of_nodes())
    out = args.out = args.out or Path("runs") / time.strftime("compare-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty; choose a new --out folder")
    calibrations = {}
    for protocol in PROTOCOLS:
        calibrations[protocol] = calibrate(setup, protocol, args.target_mean_eps)
        c = calibrations[protocol]
        CONSOLE.print(f"{protocol}: sigma = {c.sigma:.4g} gives planned mean eps {c.planned_mean_eps:.4g} "
                      f"({c.column}{'' if protocol == GOSSIP else f', order {c.alpha:g}'}) after "
                      f"{c.evaluations} plan evaluations")
    seed = secrets.randbits(SEED_BITS) if args.data_seed is None else args.data_seed
    first = comparison_topology(setup, graph, setup.params(GOSSIP, 1.0, 2.0, graph.number_of_nodes()), run_id="data")
    write_data(setup, first, out / "data", seed)
    launch = LaunchOptions(sampler=args.sampler, simulation_seed=args.seed, timeout_s=args.timeout,
                           startup_timeout_s=args.startup_timeout)
    entries = {}
    for protocol, calibration in calibrations.items():
        report = run_protocol(setup, calibration, out / protocol, out / "data", launch, secure=not args.insecure)
        entries[protocol] = protocol_result(calibration, report, out / protocol)
    document = comparison(setup, graph.number_of_nodes(), args.target_mean_eps, entries,
                          time.monotonic() - started, seed)
    path = write_comparison(document, out)
    figures.loss_vs_hops(document, out)
    figures.accuracy(document, out)
    print_tables(document)
    CONSOLE.print(f"wrote {path}, {out / figures.LOSS_FIGURE} and {out / figures.ACCURACY_FIGURE} "
                  f"in {document['wall_time_s']:.0f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    compare = subparsers.add_parser(
        "compare", help="random-walk DP-SGD vs Muffliato-GD gossip at the same mean pairwise eps (real runs)")
    compare.add_argument("--graph", default="hypercube", choices=tuple(GENERATORS),
                         help="graph kind both protocols run on (default hypercube: the papers' exponential graph)")
    compare.add_argument("--n", type=int, default=16, help="number of nodes (default 16; a named graph fixes it)")
    compare.add_argument("--graph-seed", type=int, default=0, help="seed of a random graph kind (default 0)")
    compare.add_argument("--dataset", choices=DATASETS, default="breast_cancer", help="default breast_cancer")
    compare.add_argument("--data-seed", type=int, default=None, help="seed of the split both runs learn from")
    compare.add_argument("--target-mean-eps", type=float, default=1.0,
                         help="mean pairwise eps at delta = 1e-5 both protocols are calibrated to (default 1)")
    compare.add_argument("--steps-per-node", type=int, default=CompareSetup.steps_per_node,
                         help="T_gd: gossip's gradient steps per node; the walk takes n * T_gd (default 10)")
    compare.add_argument("--gossip-rounds", type=int, default=CompareSetup.gossip_rounds,
                         help="K: plain gossip rounds after every gossip step (default 1)")
    compare.add_argument("--clip", type=float, default=CompareSetup.clip, help="per-example clip C (default 1)")
    compare.add_argument("--batch", type=count, default=CompareSetup.batch,
                         help="minibatch b; Delta = 2C/b for both (default 16)")
    compare.add_argument("--learning-rate", type=float, default=CompareSetup.gossip_learning_rate,
                         help="gossip's learning rate (default 0.5)")
    compare.add_argument("--walk-learning-rate", type=float, default=None,
                         help="the walk's learning rate (default: gossip's divided by n)")
    compare.add_argument("--out", type=Path, default=None,
                         help="new folder for everything (default runs/compare-<time>)")
    compare.add_argument("--sampler", choices=("secure", "simulation"), default="secure",
                         help="noise sampler of every node (default: secure)")
    compare.add_argument("--seed", type=int, default=None, help="master seed of the simulation sampler")
    compare.add_argument("--insecure", action="store_true", help="plain-text gRPC (default: mutual TLS)")
    compare.add_argument("--timeout", type=positive, default=None, metavar="SECONDS",
                         help="give up on a run that has not finished this many seconds after its node processes "
                              "started")
    compare.add_argument("--startup-timeout", type=positive, default=None, metavar="SECONDS",
                         help="give up on a run whose node processes have not all started after this many seconds")
    add_experiment_argument(compare)
    compare.set_defaults(handler=_compare_command)
