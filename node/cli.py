"""`netdp-node`: run one peer of a published topology, or the several ids published at one address."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from node.agent_budget import parse_budget
from node.breaks import Breaks
from node.data import node_data_file
from node.errors import ConfigError, NetdpError
from node.idset import parse_ids
from node.noise import node_seed
from node.runtime import NodeConfig, run_process
from node.topology import Topology, load_topology

INSECURE_WARNING = (
    "netdp-node: WARNING: running WITHOUT TLS. Messages are unauthenticated plain text and any "
    "process that can reach this port can claim to be a neighbour. Use only for local demos."
)


def _id_set(spec: str) -> tuple[int, ...]:
    """parse_ids for argparse: a bad set is a usage error with parse_ids' own message."""
    try:
        return parse_ids(spec)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="netdp-node",
        description="Run one peer: serve its gRPC endpoint, gossip with its neighbours, log its view. With "
                    "--nodes, run every node id the topology publishes at one address behind one gRPC server; "
                    "each id keeps its own data, noise, view log and estimate.",
    )
    parser.add_argument("--version", action="version", version=f"netdp-node {version('netdp')}")
    parser.add_argument("--topology", type=Path, required=True, help="published topology file (JSON)")
    hosted = parser.add_mutually_exclusive_group(required=True)
    hosted.add_argument("--id", type=int, dest="node_id", help="this node's id in the topology")
    hosted.add_argument("--nodes", type=_id_set, metavar="IDS",
                        help="the node ids this process hosts, e.g. 0-255 or 0-3,8: all the ids the topology "
                             "publishes at one address")
    parser.add_argument("--data", type=Path, required=True,
                        help="with --id: this node's private vector (JSON, NPY, NPZ or CSV); with --nodes: the "
                             "folder holding node-<id>.<ext> for every hosted id")
    parser.add_argument("--log-dir", type=Path, required=True,
                        help="with --id: where view.log, private.log and estimate.json go; with --nodes: the "
                             "folder that gets node-<id>/ for every hosted id")
    parser.add_argument("--sampler", choices=("secure", "simulation"), default="secure",
                        help="noise sampler: 'secure' (CSPRNG, exact discrete Gaussian; default) or "
                             "'simulation' (seeded numpy, for reproducible experiments only)")
    parser.add_argument("--sim-seed", type=int, default=None,
                        help="seed of the simulation sampler (never logged); with --nodes, the run's master seed "
                             "from which each hosted id derives its own, as `netdp run --seed` does")
    security = parser.add_mutually_exclusive_group(required=True)
    security.add_argument("--tls-dir", type=Path,
                          help="folder with ca.pem, node.pem, node.key (from `netdp certs`; the certificate names "
                               "every hosted id)")
    security.add_argument("--insecure", action="store_true", help="plain-text gRPC without authentication (demos only)")
    parser.add_argument("--budget", type=parse_budget, default=None, metavar="EPSILON[,DELTA]",
                        help="personalized-cd only: this agent's own privacy budget, at most the published one "
                             "(an agent may be more private than published, never less; a larger one is refused); "
                             "without DELTA the published delta is kept. With --nodes it applies to every hosted "
                             "id. It is what the agent's ledger enforces, and its run header says so for the audit")
    parser.add_argument("--resume", action="store_true",
                        help="personalized-cd only: if --log-dir already holds this run's logs (a killed agent "
                             "restarted), rejoin the run: rebuild the budget ledger, the model and the neighbours' "
                             "models from the logs and append to them; otherwise start as usual. The restart must "
                             "match its first start (topology, id, sampler, budget); other protocols refuse it")
    parser.add_argument("--fault-kill-at-step", "--fault-kill-at-round", type=int, default=None, metavar="STEP",
                        dest="fault_kill_at_step",
                        help="fault injection for tests and experiments: SIGKILL this process as a hosted id's "
                             "local step STEP starts (a round of synchronous gossip, a tick of its clock in async "
                             "gossip; in a token walk, step k starts once it has passed the token on after k visits, "
                             "step 0 as it starts)")
    parser.add_argument("--fault-lose-replies", type=float, default=0.0, metavar="FRACTION",
                        help="fault injection for tests and experiments: lose this fraction (0..1) of the replies "
                             "to calls this node answers, after handling the request")
    parser.add_argument("--fault-lose-acks", type=float, default=0.0, metavar="FRACTION",
                        help="fault injection for tests and experiments: lose this fraction (0..1) of the "
                             "acknowledgements of the deliveries this node receives, after handling (durably "
                             "logging) them: the sender sees a failed attempt and retries")
    parser.add_argument("--fault-clock-speedup", type=float, default=1.0, metavar="FACTOR",
                        help="fault injection for tests and experiments: every hosted id's Poisson clock ticks "
                             "FACTOR (> 0) times the published rate (an agent waking up more often than planned)")
    parser.add_argument("--break", action="append", default=[], dest="breaks", metavar="SPEC",
                        help="negative control for tests and demonstrations: a deliberate privacy bug of every hosted "
                             "id, written into its run header: noise-scale=F (noise drawn at F times the published "
                             "scale), skip-clip (no clipping), leak-raw (its contribution sent once more before any "
                             "noise); repeatable")
    parser.add_argument("--verbose", action="store_true", help="log progress to stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s node %(message)s")
    if args.sim_seed is not None and args.sampler != "simulation":
        print("netdp-node: error: --sim-seed only goes with --sampler simulation", file=sys.stderr)
        return 2
    if args.sim_seed is not None and args.resume:
        print("netdp-node: error: --resume does not go with --sim-seed: the restarted agent would draw its first "
              "life's noise again", file=sys.stderr)
        return 2
    for flag, fraction in (("--fault-lose-replies", args.fault_lose_replies),
                           ("--fault-lose-acks", args.fault_lose_acks)):
        if not 0.0 <= fraction <= 1.0:
            print(f"netdp-node: error: {flag} takes a fraction in 0..1", file=sys.stderr)
            return 2
    if not 0.0 < args.fault_clock_speedup < float("inf"):
        print("netdp-node: error: --fault-clock-speedup takes a finite factor > 0", file=sys.stderr)
        return 2
    if args.insecure:
        print(INSECURE_WARNING, file=sys.stderr)
    try:
        topology = load_topology(args.topology)
        if args.node_id is not None and not 0 <= args.node_id < topology.n:
            raise ConfigError(f"--id {args.node_id} is not a node of {args.topology} (n = {topology.n})")
        outcomes = asyncio.run(run_process(_config(args, topology)))
    except NetdpError as exc:
        print(f"netdp-node: error: {exc}", file=sys.stderr)
        return 2
    except asyncio.CancelledError:
        print("netdp-node: stopped before the run completed; logs are readable up to here", file=sys.stderr)
        return 3
    for outcome in outcomes:
        print(f"netdp-node {outcome.node_id}: done after {outcome.steps_completed} steps", file=sys.stderr)
    return 0


def _config(args: argparse.Namespace, topology: Topology) -> NodeConfig:
    """One id with its own files (--id), or every id of --nodes with its files under the given folders."""
    if args.node_id is not None:
        node_ids = (args.node_id,)
        data_paths, log_dirs = {args.node_id: args.data}, {args.node_id: args.log_dir}
        seeds = {} if args.sim_seed is None else {args.node_id: args.sim_seed}
    else:
        node_ids = args.nodes
        data_paths = {v: node_data_file(args.data, v) for v in node_ids}
        log_dirs = {v: args.log_dir / f"node-{v}" for v in node_ids}
        seeds = {} if args.sim_seed is None else {v: node_seed(args.sim_seed, v) for v in node_ids}
    return NodeConfig(
        topology=topology,
        node_ids=node_ids,
        data_paths=data_paths,
        log_dirs=log_dirs,
        sampler=args.sampler,
        simulation_seeds=seeds,
        tls_dir=None if args.insecure else args.tls_dir,
        kill_at_step=args.fault_kill_at_step,
        lost_reply_fraction=args.fault_lose_replies,
        lost_ack_fraction=args.fault_lose_acks,
        clock_speedup=args.fault_clock_speedup,
        resume=args.resume,
        budget=args.budget,
        breaks=Breaks.parsed(args.breaks),
    )


if __name__ == "__main__":
    sys.exit(main())
