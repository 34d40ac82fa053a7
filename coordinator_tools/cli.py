"""`netdp`: the coordinator tools' command line.

Each feature module owns its sub-command through a `register(subparsers)` function;
this file only assembles them and turns netdp errors into one-line messages. A command's
module (and what it imports: numpy, the accountants, matplotlib) is imported only when that
command runs: `netdp --help` and `netdp --version` list the commands from the table below.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Collection, Sequence
from importlib.metadata import version
from typing import NoReturn

from coordinator_tools.experiment import OPTION_LABELS, Experiment, expand, keep_copy
from node.errors import NetdpError

# Each command: the module that registers it, and its line in `netdp --help` (the module's own help, which a test
# keeps equal, so that listing the commands imports none of them).
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("coordinator_tools.cluster.command",
            "run a local cluster: one node process per topology address, on loopback"),
    "data": ("coordinator_tools.dataprep.command", "make per-node data files"),
    "demo": ("coordinator_tools.cluster.demo", "run a local cluster on embedded defaults and show the result"),
    "topology": ("coordinator_tools.topology.command", "make, import and inspect published topologies"),
    "certs": ("coordinator_tools.certs", "make a cluster CA and one mutual-TLS certificate per node process"),
    "compose": ("coordinator_tools.compose",
                "generate a docker-compose cluster / swarm stack (one service per node process) for a topology"),
    "collect": ("coordinator_tools.collect",
                "gather a run's public logs (a run folder, or a swarm stack once it finished) into a run folder"),
    "log": ("coordinator_tools.logview", "inspect a node's logs"),
    "audit": ("coordinator_tools.audit.command", "measure what every node of a finished run leaked to every other"),
    "plan": ("coordinator_tools.audit.plan_command",
             "pairwise privacy loss of a planned run, T_stop, and the noise a target loss needs"),
    "compare": ("coordinator_tools.compare.command",
                "random-walk DP-SGD vs Muffliato-GD gossip at the same mean pairwise eps, or noise designs for "
                "averaging or learning (--designs) at the same target (real runs)"),
    "sweep": ("coordinator_tools.sweep.command",
              "privacy-utility sweep: a grid of runs, each audited, as a CSV and figures"),
    "reproduce": ("coordinator_tools.reproduce.command",
                  "rerun a paper's headline figure and show it beside the published values"),
}


class OneLineParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line naming the command and the flag (`--help` shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(registered: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The `netdp` parser; `registered`: the commands whose modules are imported to add their options (default
    all of them), the others only listed."""
    parser = OneLineParser(
        prog="netdp",
        description="Run private decentralized protocols on real peers and audit what each node leaked.",
    )
    parser.add_argument("--version", action="version", version=f"netdp {version('netdp')}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, summary) in COMMANDS.items():
        if registered is None or name in registered:
            importlib.import_module(module_name).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command argv runs (its first word that is one), or None (`netdp --help`, `netdp --version`)."""
    return next((token for token in argv if token in COMMANDS), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_named(argv)
    parser = build_parser(() if command is None else (command,))
    try:
        argv, experiment = _with_experiment(parser, command, argv)
    except NetdpError as exc:
        print(f"netdp: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        if experiment is not None:
            setattr(args, OPTION_LABELS, experiment.labels())
        code = int(args.handler(args) or 0)
        if experiment is not None:
            keep_copy(experiment, args.out)
        return code
    except NetdpError as exc:
        print(f"netdp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("netdp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`netdp log show ... | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not fail again
        return 0


def _with_experiment(parser: argparse.ArgumentParser, command: str | None,
                     argv: list[str]) -> tuple[list[str], Experiment | None]:
    """argv with the keys of the experiment file given to its command (`--experiment FILE`) put in as flags."""
    if command is None:
        return argv, None
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    at = argv.index(command)
    rest, experiment = expand(subparsers.choices[command], argv[at + 1:])
    return [*argv[:at + 1], *rest], experiment


if __name__ == "__main__":
    sys.exit(main())
