"""`netdp compare`: calibrate σ for both protocols, run both for real, audit both, compare.

DIR holds data/ (the one split both runs learn from), muffliato-gd/ and rw-sgd/ (each with
topology.json, certs/, run/ and audit/), comparison.json, loss_vs_hops.png and accuracy.png.
With --designs: data/ (the vectors every design averages), one folder per protocol design (its
run/, audit/ and, where accounted, audit-eavesdropper/), designs.csv, designs.json and designs.png.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from dataclasses import replace
from pathlib import Path

import networkx as nx
from rich.table import Table

from coordinator_tools.arguments import count, flag_names, positive
from coordinator_tools.audit.plan import Target
from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.certs import write_cluster_certs
from coordinator_tools.cluster.command import CONSOLE, launch_with_progress, report_failures
from coordinator_tools.cluster.demo_protocols import loopback_addresses
from coordinator_tools.cluster.launch import LaunchOptions, run_cluster
from coordinator_tools.cluster.ports import free_loopback_ports
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.compare import designs, figures, learning_designs
from coordinator_tools.compare.calibrate import Calibration, calibrate
from coordinator_tools.compare.results import comparison, protocol_result, write_comparison
from coordinator_tools.compare.setup import GOSSIP, GOSSIP_ALPHA, PROTOCOLS, WALK, CompareSetup, comparison_topology
from coordinator_tools.dataprep.datasets import SEED_BITS, synthetic_values, write_node_files
from coordinator_tools.dataprep.learning_data import write_minibatch_split
from coordinator_tools.experiment import add_experiment_argument
from coordinator_tools.topology.build import new_run_id
from coordinator_tools.topology.edgelist import read_edge_list
from coordinator_tools.topology.generators import GENERATORS, generate
from node.errors import ConfigError
from node.schema import config_errors
from node.topology import ProtocolParams, Topology, save_topology

CERT_VALIDITY_DAYS = 7
DESIGN_PROCESSES = 8  # node processes of a design's run, each hosting n / 8 ids
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
    rundir = launch_topology(topology, folder, data_dir, launch, secure=secure)
    return audit_run(rundir, folder / "audit", AuditOptions(data=data_dir, delta=setup.delta))


def launch_topology(topology: Topology, folder: Path, data_dir: Path, launch: LaunchOptions, *, secure: bool,
                    virtual: bool = False) -> Path:
    """Publish `topology` in `folder` and run it into folder/run (node processes, mutual TLS when `secure`; or
    `virtual`: every node in this process); return the run folder."""
    save_topology(topology, folder / "topology.json")
    if secure and not virtual:
        launch = replace(launch, certs_dir=folder / "certs")
        write_cluster_certs(topology, folder / "certs", CERT_VALIDITY_DAYS)
    processes = len({node.address for node in topology.nodes})
    how = ("virtual (one process)" if virtual else
           f"{processes} node processes, {'mutual TLS' if launch.certs_dir else 'PLAIN TEXT'}")
    CONSOLE.print(f"{topology.protocol.name}: {topology.n} nodes, {how}, sigma = {topology.protocol.sigma:.4g}")
    result = launch_with_progress(folder / "topology.json", data_dir, folder / "run", launch,
                                  runner=run_virtual if virtual else run_cluster)
    report_failures(result)
    return result.rundir


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


def print_designs(rows: list[dict[str, object]], title: str, choices: list[str]) -> None:
    """designs.csv as a table, with each MSE over central DP's under the same threat model, then the choices."""
    table = Table(title=title)
    for column in designs.COLUMNS[:-1]:
        table.add_column(column, justify="right")
    central = {r["threat_model"]: float(r["utility"]) for r in rows  # type: ignore[arg-type]
               if r["design"] == "central" and r["utility_kind"] == "mse"}  # a ratio of errors, not of accuracies
    if central:
        table.add_column("MSE / central", justify="right")
    for r in rows:
        cells = [str(r["design"]), str(r["threat_model"]), *(f"{float(r[c]):.4g}" for c in  # type: ignore[arg-type]
                                                            ("mean_eps", "worst_eps", "utility"))]
        if central:
            cells.append(f"{float(r['utility']) / central[r['threat_model']]:.2f}")  # type: ignore[arg-type]
        table.add_row(*cells)
    CONSOLE.print(table)
    for line in choices:
        CONSOLE.print(f"- {line}", highlight=False)


def _designs_command(args: argparse.Namespace) -> int:
    """`netdp compare --designs`: calibrate, run and audit each design; designs.csv, designs.json, designs.png."""
    started = time.monotonic()
    chosen = designs.chosen_designs([name.strip() for name in args.designs.split(",") if name.strip()])
    if args.topology is not None:
        edge_list = read_edge_list(args.topology)
        if edge_list.weights is not None:
            raise ConfigError(f"--topology {args.topology}: give an unweighted edge list (every design uses "
                              "Metropolis weights)")
        graph, name = edge_list.graph, f"file:{args.topology.name}"
    else:
        with config_errors():  # a bad --n is refused in one line, before anything is written
            graph = generate(args.graph, n=_graph_size(args),
                             seed=args.graph_seed if GENERATORS[args.graph].seeded else None)
        name = args.graph
    if not nx.is_connected(graph):
        raise ConfigError(f"the {name} graph is not connected: no design averages over it")
    if args.dimension < 1:
        raise ConfigError(f"--dimension must be at least 1, got {args.dimension}")
    if not args.target_eps > 0:
        raise ConfigError(f"--target-eps must be above 0, got {args.target_eps:g}")
    target = Target(args.target_eps, args.target)
    setup: designs.DesignSetup
    if args.task == "learning":
        with config_errors(flag_names(args)):
            task = CompareSetup(dataset=args.dataset, steps_per_node=args.steps_per_node, clip=args.clip,
                                batch=args.batch, gossip_learning_rate=args.learning_rate)
        setup = learning_designs.LearningDesignSetup(graph=graph, graph_name=name, target=target,
                                                     dimension=task.dimension, sensitivity=task.sensitivity,
                                                     learning=task)
    else:
        setup = designs.DesignSetup(graph=graph, graph_name=name, target=target, dimension=args.dimension)
    out, seed = _new_out(args), _data_seed(args)
    if isinstance(setup, learning_designs.LearningDesignSetup):
        split = setup.topology(setup.params("muffliato", 1.0), run_id="data")
        write_minibatch_split(setup.learning.dataset, setup.learning.batch, split, out / "data", seed)
    else:
        write_node_files(synthetic_values(setup.n, setup.dimension, setup.sensitivity, seed), out / "data")
    launch = _launch_options(args)
    processes = min(setup.n, DESIGN_PROCESSES)

    def run(params: ProtocolParams, folder: Path) -> Path:
        addresses = loopback_addresses(setup.n, -(-setup.n // processes))
        topology = setup.topology(params, new_run_id(f"compare-{params.name}"), addresses)
        return launch_topology(topology, folder, out / "data", launch, secure=not args.insecure, virtual=args.virtual)

    if isinstance(setup, learning_designs.LearningDesignSetup):
        rows = learning_designs.run_designs(setup, chosen, out, out / "data", run)
        choices = learning_designs.notes(setup, chosen)
    else:
        rows = designs.run_designs(setup, chosen, out, out / "data", run)
        choices = designs.notes(setup, chosen)
    path = designs.write_csv(rows, out / designs.CSV_FILE)
    title = f"{name}, n = {setup.n}: {args.target} eps {args.target_eps:g} (curious node), {args.task}"
    figures.designs(rows, title, out)
    (out / designs.JSON_FILE).write_text(json.dumps(
        {"graph": name, "n": setup.n, "task": args.task, "data_seed": seed, "dimension": setup.dimension,
         "target": {"rule": args.target, "eps": args.target_eps, "delta": setup.delta}, "rows": rows,
         "notes": choices, "wall_time_s": time.monotonic() - started}, indent=2) + "\n")
    print_designs(rows, title, choices)
    CONSOLE.print(f"wrote {path}, {out / designs.JSON_FILE} and {out / figures.DESIGNS_FIGURE}", highlight=False)
    return 0


def _compare_command(args: argparse.Namespace) -> int:
    if args.seed is not None and args.sampler != "simulation":
        raise ConfigError("--seed only goes with --sampler simulation")
    if args.designs is not None:
        return _designs_command(args)
    if args.target != "mean" or args.virtual or args.topology is not None:
        raise ConfigError("--target worst, --virtual and --topology go with --designs")
    started = time.monotonic()
    flags = flag_names(args)
    with config_errors(flags):  # a bad flag is refused in one line, before any calibration or run
        setup = CompareSetup(graph=args.graph, n=_graph_size(args), graph_seed=args.graph_seed, dataset=args.dataset,
                             steps_per_node=args.steps_per_node, gossip_rounds=args.gossip_rounds, clip=args.clip,
                             batch=args.batch, gossip_learning_rate=args.learning_rate,
                             walk_learning_rate=args.walk_learning_rate)
        graph = setup.make_graph()
    for protocol, rate in ((GOSSIP, "learning_rate"), (WALK, "walk_learning_rate")):
        with config_errors({**flags, "learning_rate": flags[rate]}):  # its parameters at a valid σ
            setup.params(protocol, 1.0, GOSSIP_ALPHA, graph.number_of_nodes())
    out = _new_out(args)
    calibrations = {}
    for protocol in PROTOCOLS:
        calibrations[protocol] = calibrate(setup, protocol, args.target_eps)
        c = calibrations[protocol]
        CONSOLE.print(f"{protocol}: sigma = {c.sigma:.4g} gives planned mean eps {c.planned_mean_eps:.4g} "
                      f"({c.column}{'' if protocol == GOSSIP else f', order {c.alpha:g}'}) after "
                      f"{c.evaluations} plan evaluations")
    seed = _data_seed(args)
    first = comparison_topology(setup, graph, setup.params(GOSSIP, 1.0, 2.0, graph.number_of_nodes()), run_id="data")
    write_data(setup, first, out / "data", seed)
    launch = _launch_options(args)
    entries = {}
    for protocol, calibration in calibrations.items():
        report = run_protocol(setup, calibration, out / protocol, out / "data", launch, secure=not args.insecure)
        entries[protocol] = protocol_result(calibration, report, out / protocol)
    document = comparison(setup, graph.number_of_nodes(), args.target_eps, entries,
                          time.monotonic() - started, seed)
    path = write_comparison(document, out)
    figures.loss_vs_hops(document, out)
    figures.accuracy(document, out)
    print_tables(document)
    CONSOLE.print(f"wrote {path}, {out / figures.LOSS_FIGURE} and {out / figures.ACCURACY_FIGURE} "
                  f"in {document['wall_time_s']:.0f} s")
    return 0


def _graph_size(args: argparse.Namespace) -> int | None:
    """--n for a graph kind that takes a size; None for a named graph, which fixes its own."""
    return args.n if "n" in GENERATORS[args.graph].parameters else None


def _new_out(args: argparse.Namespace) -> Path:
    """--out (default runs/compare-<time>), refused unless new or empty; kept in `args` for the experiment copy."""
    out = args.out = args.out or Path("runs") / time.strftime("compare-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty; choose a new --out folder")
    return out


def _data_seed(args: argparse.Namespace) -> int:
    """--data-seed, or a fresh one (recorded in the comparison's document)."""
    return secrets.randbits(SEED_BITS) if args.data_seed is None else int(args.data_seed)


def _launch_options(args: argparse.Namespace) -> LaunchOptions:
    """How every run of the comparison is launched: sampler, simulation seed and time limits from the flags."""
    return LaunchOptions(sampler=args.sampler, simulation_seed=args.seed, timeout_s=args.timeout,
                         startup_timeout_s=args.startup_timeout)


def register(subparsers: argparse._SubParsersAction) -> None:
    compare = subparsers.add_parser(
        "compare", help="random-walk DP-SGD vs Muffliato-GD gossip at the same mean pairwise eps, or noise designs "
        "for averaging or learning (--designs) at the same target (real runs)")
    compare.add_argument("--graph", default="hypercube", choices=tuple(GENERATORS),
                         help="graph kind both protocols run on (default hypercube: the papers' exponential graph)")
    compare.add_argument("--n", type=int, default=16, help="number of nodes (default 16; a named graph fixes it)")
    compare.add_argument("--graph-seed", type=int, default=0, help="seed of a random graph kind (default 0)")
    compare.add_argument("--dataset", choices=DATASETS, default="breast_cancer", help="default breast_cancer")
    compare.add_argument("--data-seed", type=int, default=None, help="seed of the split both runs learn from")
    compare.add_argument("--target-mean-eps", "--target-eps", dest="target_eps", type=float, default=1.0,
                         help="pairwise eps at delta = 1e-5 every protocol or design is calibrated to (default 1)")
    compare.add_argument("--designs", default=None,
                         help=f"compare noise designs instead, comma-separated: {', '.join(designs.DESIGNS)} "
                         "(each calibrated to the target, run, audited; writes designs.csv)")
    compare.add_argument("--task", choices=designs.TASKS, default="averaging",
                         help="what the designs compute (default averaging)")
    compare.add_argument("--target", choices=("mean", "worst"), default="mean",
                         help="with --designs: the rule the target bounds, mean (Muffliato's, default) or worst pair")
    compare.add_argument("--topology", type=Path, default=None,
                         help="with --designs: an edge list file ('u v' per line) to run on instead of --graph")
    compare.add_argument("--dimension", type=int, default=designs.DesignSetup.dimension,
                         help="with --designs: length of every node's vector (default 256)")
    compare.add_argument("--virtual", action="store_true",
                         help="with --designs: run every node in this process (default: node processes)")
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
