"""`netdp-node`: run one peer of a published topology."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from node.errors import NetdpError
from node.runtime import NodeConfig, run_node
from node.topology import load_topology

INSECURE_WARNING = (
    "netdp-node: WARNING: running WITHOUT TLS. Messages are unauthenticated plain text and any "
    "process that can reach this port can claim to be a neighbour. Use only for local demos."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="netdp-node",
        description="Run one peer: serve its gRPC endpoint, gossip with its neighbours, log its view.",
    )
    parser.add_argument("--topology", type=Path, required=True, help="published topology file (JSON)")
    parser.add_argument("--id", type=int, required=True, dest="node_id", help="this node's id in the topology")
    parser.add_argument("--data", type=Path, required=True, help="this node's private vector (JSON, NPY, NPZ or CSV)")
    parser.add_argument("--log-dir", type=Path, required=True, help="where view.log, private.log and estimate.json go")
    parser.add_argument("--sampler", choices=("secure", "simulation"), default="secure",
                        help="noise sampler: 'secure' (CSPRNG, exact discrete Gaussian; default) or "
                             "'simulation' (seeded numpy, for reproducible experiments only)")
    parser.add_argument("--sim-seed", type=int, default=None,
                        help="seed of the simulation sampler (never logged)")
    security = parser.add_mutually_exclusive_group(required=True)
    security.add_argument("--tls-dir", type=Path, help="folder with ca.pem, node.pem, node.key (from `netdp certs`)")
    security.add_argument("--insecure", action="store_true", help="plain-text gRPC without authentication (demos only)")
    parser.add_argument("--fault-kill-at-step", "--fault-kill-at-round", type=int, default=None, metavar="STEP",
                        dest="fault_kill_at_step",
                        help="fault injection for tests and experiments: SIGKILL this node as its local step "
                             "STEP starts (a round of synchronous gossip, a tick of its clock in async gossip; in a "
                             "token walk, step k starts once it has passed the token on after k visits, step 0 as "
                             "it starts)")
    parser.add_argument("--fault-lose-replies", type=float, default=0.0, metavar="FRACTION",
                        help="fault injection for tests and experiments: lose this fraction (0..1) of the replies "
                             "to calls this node answers, after handling the request")
    parser.add_argument("--fault-lose-acks", type=float, default=0.0, metavar="FRACTION",
                        help="fault injection for tests and experiments: lose this fraction (0..1) of the "
                             "acknowledgements of the deliveries this node receives, after handling (durably "
                             "logging) them: the sender sees a failed attempt and retries")
    parser.add_argument("--verbose", action="store_true", help="log progress to stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s node %(message)s")
    if args.sim_seed is not None and args.sampler != "simulation":
        print("netdp-node: error: --sim-seed only goes with --sampler simulation", file=sys.stderr)
        return 2
    for flag, fraction in (("--fault-lose-replies", args.fault_lose_replies),
                           ("--fault-lose-acks", args.fault_lose_acks)):
        if not 0.0 <= fraction <= 1.0:
            print(f"netdp-node: error: {flag} takes a fraction in 0..1", file=sys.stderr)
            return 2
    if args.insecure:
        print(INSECURE_WARNING, file=sys.stderr)
    try:
        config = NodeConfig(
            topology=load_topology(args.topology),
            node_id=args.node_id,
            data_path=args.data,
            log_dir=args.log_dir,
            sampler=args.sampler,
            simulation_seed=args.sim_seed,
            tls_dir=None if args.insecure else args.tls_dir,
            kill_at_step=args.fault_kill_at_step,
            lost_reply_fraction=args.fault_lose_replies,
            lost_ack_fraction=args.fault_lose_acks,
        )
        if not 0 <= config.node_id < config.topology.n:
            raise NetdpError(f"--id {config.node_id} is not a node of {args.topology} (n = {config.topology.n})")
        outcome = asyncio.run(run_node(config))
    except NetdpError as exc:
        print(f"netdp-node: error: {exc}", file=sys.stderr)
        return 2
    except asyncio.CancelledError:
        print("netdp-node: stopped before the run completed; logs are readable up to here", file=sys.stderr)
        return 3
    print(f"netdp-node {outcome.node_id}: done after {outcome.steps_completed} steps", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
