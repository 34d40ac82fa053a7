"""`netdp run`: a local cluster of real node processes, with live progress."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coordinator_tools.cluster.launch import ClusterResult, LaunchOptions, run_cluster
from coordinator_tools.cluster.virtual import refuse_process_options, run_virtual
from node.breaks import Breaks
from node.errors import ConfigError, NetdpError
from node.topology import load_topology

CONSOLE = Console(stderr=True)


def parse_kill(spec: str) -> tuple[int, int]:
    """'NODE@ROUND' -> (node, round)."""
    node, sep, round_index = spec.partition("@")
    if not sep or not node.isdigit() or not round_index.isdigit():
        raise argparse.ArgumentTypeError(f"expected NODE@ROUND, e.g. 3@2, got {spec!r}")
    return int(node), int(round_index)


def _steps_per_node(protocol: BaseModel) -> int | None:
    """Local steps every node makes when the protocol fixes their number (rounds, exchanges, or wake-ups or updates);
    else None."""
    return (getattr(protocol, "rounds", None) or getattr(protocol, "exchanges", None)
            or getattr(protocol, "wakeups", None) or getattr(protocol, "updates", None))


def launch_with_progress(topology_path: Path, data_dir: Path, rundir: Path, options: LaunchOptions,
                         runner: Callable[..., ClusterResult] = run_cluster) -> ClusterResult:
    """run_cluster (or `runner`: virtual.run_virtual) with a progress bar of local steps started over all nodes.

    The bar appears once the nodes run, so that a refused input is the only thing printed.
    """
    topology = load_topology(topology_path)
    steps = _steps_per_node(topology.protocol)
    progress = Progress(TextColumn("[bold]local steps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=CONSOLE, transient=True)
    task = progress.add_task("steps", total=None if steps is None else topology.n * steps)

    def show(started: dict[int, int]) -> None:
        progress.start()  # once; later calls return at once
        progress.update(task, completed=sum(started.values()))

    try:
        return runner(topology_path, data_dir, rundir, options, on_progress=show)
    finally:
        if progress.live.is_started:
            progress.stop()


def report_failures(result: ClusterResult) -> None:
    """Raise a clear error naming every node that failed, with its last words."""
    if result.timed_out:
        raise NetdpError(f"the cluster did not finish in time; logs are in {result.rundir}")
    if result.failures:
        lines = [f"node {r.node_id} exited with code {r.exit_code}: {r.stderr_tail or '(no message)'}"
                 for r in result.failures]
        raise NetdpError(f"{len(lines)} node(s) failed; logs are in {result.rundir}\n  " + "\n  ".join(lines))


def parse_break(spec: str) -> tuple[int, str]:
    """'NODE:SPEC' -> (node, spec); the spec itself is checked by `node.breaks.Breaks.parsed`."""
    node, sep, what = spec.partition(":")
    if not sep or not node.isdigit() or not what:
        raise argparse.ArgumentTypeError(f"expected NODE:SPEC, e.g. 3:noise-scale=0.25, got {spec!r}")
    return int(node), what


def options_from_args(args: argparse.Namespace) -> LaunchOptions:
    if args.seed is not None and args.sampler != "simulation":
        raise ConfigError("--seed only goes with --sampler simulation")
    specs: dict[int, list[str]] = {}
    for node, spec in args.breaks or ():
        specs.setdefault(node, []).append(spec)
    return LaunchOptions(
        sampler=args.sampler,
        simulation_seed=args.seed,
        certs_dir=None if args.insecure else args.certs,
        kill_at_round=dict(args.kill or ()),
        timeout_s=args.timeout,
        canaries=args.canaries,
        breaks={node: Breaks.parsed(given) for node, given in specs.items()},
    )


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by `netdp run` and `netdp demo`."""
    parser.add_argument("--sampler", choices=("secure", "simulation"), default="secure",
                        help="noise sampler of every node (default: secure)")
    parser.add_argument("--seed", "--sim-seed", type=int, default=None, dest="seed",
                        help="master seed of the simulation sampler (each node derives its own; never logged)")
    security = parser.add_mutually_exclusive_group()
    security.add_argument("--certs", type=Path, help="certificates from `netdp certs` (mutual TLS)")
    security.add_argument("--insecure", action="store_true", help="plain-text gRPC (local demos only)")
    parser.add_argument("--kill", type=parse_kill, action="append", metavar="NODE@ROUND",
                        help="fault injection: SIGKILL NODE's process (with every id it hosts) as the first "
                             "id it hosts starts ROUND (repeatable)")
    parser.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    parser.add_argument("--canaries", type=int, default=0, metavar="M",
                        help="an audit run: every node plants M secret canaries (fair coins, logged privately) in M "
                             "coordinates appended to its vectors, so that `netdp audit` tests the real run "
                             "(its empirical column); RUNDIR's topology publishes M")
    parser.add_argument("--break", type=parse_break, action="append", dest="breaks", metavar="NODE:SPEC",
                        help="negative control for tests and demonstrations: NODE deliberately breaks privacy, "
                             "SPEC one of noise-scale=F (noise at F times the published scale), skip-clip (no "
                             "clipping), leak-raw (its contribution sent once more before any noise); repeatable")


def _run_command(args: argparse.Namespace) -> int:
    if args.certs is None and not args.insecure and not args.virtual:
        raise ConfigError("pass --certs DIR (from `netdp certs`) or --insecure for a plain-text local run")
    options = options_from_args(args)
    if args.virtual:  # every node in this process: no TLS to choose, process-only options refused
        refuse_process_options(options)
    result = launch_with_progress(args.topology, args.data, args.out, options,
                                  runner=run_virtual if args.virtual else run_cluster)
    report_failures(result)
    finished = sum(1 for r in result.nodes if r.succeeded)
    CONSOLE.print(f"{finished}/{result.topology.n} nodes finished; logs and estimates in {result.rundir}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser(
        "run", help="run a local cluster: one node process per topology address, on loopback",
        description="Run a local cluster on loopback: one `netdp-node` process per address of TOPOLOGY, hosting "
                    "the node ids published there (one, or several behind one gRPC server: see `netdp topology "
                    "generate --ids-per-process`). RUNDIR gets node-<id>/ per id whatever the hosting.")
    run.add_argument("topology", type=Path, help="published topology (addresses on this machine)")
    run.add_argument("--data", type=Path, required=True, help="folder with node-<id>.json (or .npy/.npz/.csv) files")
    run.add_argument("--out", type=Path, required=True, help="new folder for the run: topology, logs, estimates")
    add_launch_arguments(run)
    run.add_argument("--virtual", action="store_true",
                     help="run every node in this one process over the in-process transport (no TLS, no fault "
                          "injection; same protocol code, validation and logs)")
    run.set_defaults(handler=_run_command)
