"""`netdp data`: the command tree over the data-preparation modules (each adds its own sub-command)."""

from __future__ import annotations

import argparse
from pathlib import Path

from coordinator_tools.dataprep.datasets import chosen_seed, output_folder, synthetic_data, write_node_files
from coordinator_tools.dataprep.learning_data import register_split
from coordinator_tools.dataprep.personalized_task import register_task
from coordinator_tools.dataprep.ratings import register_ratings
from coordinator_tools.dataprep.recommendation_task import register_recommendation
from node.errors import ConfigError
from node.topology import load_topology


def _generate_command(args: argparse.Namespace) -> int:
    topology = load_topology(args.topology)
    seed = chosen_seed(args.seed)
    try:
        values = synthetic_data(topology, seed)
    except ConfigError as exc:
        raise ConfigError(f"{args.topology}: {exc}") from None
    out = output_folder(args.out, force=args.force)
    write_node_files(values, out)
    params = topology.protocol
    what = f" (one category in 0..{params.categories - 1} each)" if params.name == "ring-histogram" else ""
    print(f"wrote {topology.n} data files{what} to {out} (seed {seed}; pass --seed {seed} to make them again)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="make per-node data files")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    generate = data_sub.add_parser("generate", help="synthetic vectors for averaging (categories for ring-histogram), "
                                   "one file per node")
    generate.add_argument("topology", type=Path, help="topology file (gives n, dimension and sensitivity)")
    generate.add_argument("--out", type=Path, required=True, help="new or empty folder for node-<id>.json files")
    generate.add_argument("--seed", type=int, default=None,
                          help="seed of the synthetic generator (default: a fresh one, printed)")
    generate.add_argument("--force", action="store_true", help="write into a folder that already holds files")
    generate.set_defaults(handler=_generate_command)
    register_split(data_sub)
    register_task(data_sub)
    register_recommendation(data_sub)
    register_ratings(data_sub)
