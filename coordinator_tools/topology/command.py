"""`netdp topology generate | import | show`: publish a topology file and inspect one."""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

import networkx as nx
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from coordinator_tools.arguments import flag_names
from coordinator_tools.topology.build import DEFAULT_BASE_PORT, DEFAULT_HOST, build_topology, new_run_id
from coordinator_tools.topology.edgelist import read_edge_list
from coordinator_tools.topology.generators import GENERATORS, SEED_BITS, generate, public_seed
from coordinator_tools.topology.protocol_options import (
    GraphFacts,
    add_protocol_options,
    protocol_params,
    summary_rows,
)
from node.errors import ConfigError
from node.schema import config_errors
from node.topology import (
    ErdosRenyiSchedule,
    FixedSchedule,
    GraphSchedule,
    NetworkParams,
    Topology,
    load_topology,
    save_topology,
)

# The flag that sets each field of an erdos_renyi schedule, to name it when the schedule refuses a value.
SCHEDULE_FLAGS = {"p": "--edge-probability", "seed": "--schedule-seed"}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `netdp topology` and its actions to the CLI."""
    parser = subparsers.add_parser(
        "topology",
        help="make, import and inspect published topologies",
        description="Make the topology file every node loads: graph, weights, addresses, protocol parameters.",
    )
    actions = parser.add_subparsers(dest="topology_command", required=True, metavar="ACTION")
    publishing = _publishing_options()

    generate_parser = actions.add_parser(
        "generate",
        parents=[publishing],
        help="publish a generated graph",
        description="Generate a graph of kind KIND and publish it as a topology file.",
        epilog="graph kinds:\n" + "\n".join(f"  {name:<24}{kind.summary}" for name, kind in GENERATORS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    generate_parser.add_argument("kind", metavar="KIND", choices=list(GENERATORS), help="graph kind (listed below)")
    generate_parser.add_argument("--n", type=int, help="number of nodes (not for the bundled real graphs)")
    generate_parser.add_argument(
        "--seed", type=int, help="public seed of a random kind (default: a fresh one, recorded in the file)"
    )
    generate_parser.add_argument("--rows", type=int, help="grid/torus: number of rows (with --cols)")
    generate_parser.add_argument("--cols", type=int, help="grid/torus: number of columns (with --rows)")
    _add_kind_option(generate_parser, "erdos_renyi", "c", float, "edge probability is c ln(n)/n")
    _add_kind_option(
        generate_parser, "random_geometric", "radius", float, "link radius (default sqrt(2 ln(n) / (pi n)))"
    )
    _add_kind_option(generate_parser, "stochastic_block_model", "blocks", int, "number of blocks")
    _add_kind_option(generate_parser, "stochastic_block_model", "p_in", float, "edge probability inside a block")
    _add_kind_option(generate_parser, "stochastic_block_model", "p_out", float, "edge probability across blocks")
    generate_parser.set_defaults(handler=_generate)

    import_parser = actions.add_parser(
        "import",
        parents=[publishing],
        help="publish a graph read from an edge list file",
        description="Publish the graph of an edge list: one 'u v' or 'u v weight' per line, "
        "nodes 0..n-1, '#' starts a comment.",
    )
    import_parser.add_argument("edgelist", metavar="EDGELIST", type=Path, help="edge list file")
    import_parser.set_defaults(handler=_import)

    show_parser = actions.add_parser("show", help="summarize a topology file", description="Summarize a topology file.")
    show_parser.add_argument("topology", metavar="TOPOLOGY", type=Path, help="topology file (JSON)")
    show_parser.set_defaults(handler=_show)


def _add_kind_option(parser: argparse.ArgumentParser, kind: str, parameter: str, kind_type: type, text: str) -> None:
    """--parameter of one generator; the help quotes the generator's own default so the two cannot drift."""
    default = GENERATORS[kind].parameters[parameter].default
    suffix = "" if default is None else f" (default {default})"
    parser.add_argument("--" + parameter.replace("_", "-"), type=kind_type, help=f"{kind}: {text}{suffix}")


def _publishing_options() -> argparse.ArgumentParser:
    """Options shared by `generate` and `import`: output, weights, protocol and network parameters."""
    options = argparse.ArgumentParser(add_help=False)
    add = options.add_argument
    add("--out", type=Path, required=True, help="topology file to write (JSON)")
    add("--run-id", help="run id (default: the graph's name and a random suffix)")
    add(
        "--weighting",
        choices=["metropolis", "min_degree"],
        help="gossip weights from degrees (default metropolis; not with a weighted edge list)",
    )
    add("--host", default=DEFAULT_HOST, help="host of every node's address (default %(default)s)")
    add(
        "--base-port", type=int, default=DEFAULT_BASE_PORT, help="node i listens on base-port + i (default %(default)s)"
    )
    add(
        "--ids-per-process",
        type=int,
        default=1,
        metavar="K",
        help="host K consecutive node ids per `netdp-node` process: ids i share the address base-port + i // K, "
        "and `netdp run` and `netdp certs` start and certify one process per address (default %(default)s)",
    )
    add(
        "--round-deadline",
        type=float,
        default=NetworkParams().round_deadline_s,
        help="seconds a node waits for a round's values before dropping a neighbour (default %(default)s)",
    )
    add(
        "--schedule",
        choices=["fixed", "erdos_renyi"],
        default="fixed",
        help="the graph every step gossips on: 'fixed', the graph given, or 'erdos_renyi', a fresh G(n, p) per "
        "step that every node derives from the public seed; the graph given then only sets the number of nodes, "
        "e.g. `netdp topology generate complete --n 16 --schedule erdos_renyi --edge-probability 0.3 ...` "
        "(default %(default)s)",
    )
    add("--edge-probability", type=float, help="erdos_renyi schedule: probability p of each edge at each step")
    add(
        "--schedule-seed",
        type=int,
        help="erdos_renyi schedule: public seed of the step graphs (default: a fresh one, recorded in the file)",
    )
    add_protocol_options(options)
    return options


def _generate(args: argparse.Namespace) -> int:
    seed = public_seed(args.kind, args.seed)
    with config_errors():
        graph = generate(
            args.kind,
            n=args.n,
            seed=seed,
            rows=args.rows,
            cols=args.cols,
            c=args.c,
            radius=args.radius,
            blocks=args.blocks,
            p_in=args.p_in,
            p_out=args.p_out,
        )
    return _publish(args, graph, graph_name=args.kind, graph_seed=seed)


def _import(args: argparse.Namespace) -> int:
    edge_list = read_edge_list(args.edgelist)
    if edge_list.weights is not None and args.weighting is not None:
        raise ConfigError(f"{args.edgelist} gives explicit weights; drop --weighting")
    graph_name = f"file:{args.edgelist.name}"
    return _publish(args, edge_list.graph, graph_name=graph_name, graph_seed=None, explicit_weights=edge_list.weights)


def _publish(
    args: argparse.Namespace,
    graph: nx.Graph,
    *,
    graph_name: str,
    graph_seed: int | None,
    explicit_weights: dict[tuple[int, int], float] | None = None,
) -> int:
    """Build the topology from the graph and the shared options, write it, and summarize it."""
    weighting = args.weighting or "metropolis"
    with config_errors(flag_names(args)):
        schedule = _graph_schedule(args)
        protocol = protocol_params(args, GraphFacts(graph, weighting, explicit_weights, schedule))
        topology = build_topology(
            graph,
            graph_name=graph_name,
            run_id=args.run_id or new_run_id(graph_name),
            protocol=protocol,
            weighting=weighting,
            graph_seed=graph_seed,
            host=args.host,
            base_port=args.base_port,
            ids_per_process=args.ids_per_process,
            network=NetworkParams(round_deadline_s=args.round_deadline),
            explicit_weights=explicit_weights,
            schedule=schedule,
        )
    save_topology(topology, args.out)
    _print_summary(topology, title=f"wrote {args.out}")
    return 0


def _graph_schedule(args: argparse.Namespace) -> GraphSchedule:
    """The --schedule block; a drawn schedule without --schedule-seed gets a fresh public seed (shown, recorded)."""
    if args.schedule == "fixed":
        stray = [flag for flag in SCHEDULE_FLAGS.values() if getattr(args, flag[2:].replace("-", "_")) is not None]
        if stray:
            raise ConfigError(f"{stray[0]} only goes with --schedule erdos_renyi")
        return FixedSchedule()
    if args.edge_probability is None:
        raise ConfigError("--schedule erdos_renyi needs --edge-probability")
    seed = secrets.randbits(SEED_BITS) if args.schedule_seed is None else args.schedule_seed
    try:
        return ErdosRenyiSchedule(p=args.edge_probability, seed=seed)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise ConfigError(f"{SCHEDULE_FLAGS[str(first['loc'][0])]}: {first['msg']}") from None


def _show(args: argparse.Namespace) -> int:
    _print_summary(load_topology(args.topology), title=str(args.topology))
    return 0


def _print_summary(topology: Topology, *, title: str) -> None:
    seed = "" if topology.graph_seed is None else f" (seed {topology.graph_seed})"
    rows: list[tuple[str, object]] = [
        ("run id", topology.run_id),
        ("graph", topology.graph + seed),
        ("nodes", topology.n),
        *_graph_rows(topology),
        *summary_rows(topology),
        ("round deadline (s)", topology.network.round_deadline_s),
    ]
    table = Table(title=title, show_header=False)
    table.add_column("quantity")
    table.add_column("value")
    for name, value in rows:
        table.add_row(name, str(value))
    Console(highlight=False).print(table)


def _graph_rows(topology: Topology) -> list[tuple[str, object]]:
    """The graph's links and degrees (or how it is drawn anew each step), weights and spectral numbers."""
    schedule = topology.schedule
    if isinstance(schedule, ErdosRenyiSchedule):
        rows: list[tuple[str, object]] = [("graph schedule", f"G(n, p = {schedule.p}) per step, seed {schedule.seed}")]
    else:
        degrees = [len(peers) for peers in topology.neighbours]
        rows = [(name, len(links)) for name, links in (("edges", topology.edges), ("arcs", topology.arcs)) if links]
        rows.append(("degree min / max", f"{min(degrees)} / {max(degrees)}"))
    rows.append(("weighting", topology.weighting))
    if topology.transitions is not None:
        rows.append(("transitions", f"{len(topology.transitions)} published"))
    spectral = (("spectral gap", topology.spectral_gap), ("gamma", topology.gamma))
    return rows + [(name, f"{value:.6g}") for name, value in spectral if value is not None]
