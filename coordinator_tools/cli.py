"""`netdp`: the coordinator tools' command line.

Each feature module owns its sub-commands through a `register(subparsers)` function;
this file only assembles them and turns netdp errors into one-line messages.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version
from typing import NoReturn

from coordinator_tools.arguments import OPTION_LABELS
from coordinator_tools.experiment import Experiment, expand, given_on_command_line, keep_copy
from node.errors import NetdpError

COMMAND_MODULES = (
    "coordinator_tools.cluster.command",
    "coordinator_tools.datasets",
    "coordinator_tools.cluster.demo",
    "coordinator_tools.topology.command",
    "coordinator_tools.certs",
    "coordinator_tools.compose",
    "coordinator_tools.collect",
    "coordinator_tools.logview",
    "coordinator_tools.audit.command",
    "coordinator_tools.audit.plan_command",
    "coordinator_tools.compare.command",
    "coordinator_tools.sweep.command",
    "coordinator_tools.reproduce.command",
)


class OneLineParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line naming the command and the flag (`--help` shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="netdp",
        description="Run private decentralized protocols on real peers and audit what each node leaked.",
    )
    parser.add_argument("--version", action="version", version=f"netdp {version('netdp')}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        argv, experiment = _with_experiment(parser, argv)
    except NetdpError as exc:
        print(f"netdp: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        if experiment is not None:
            command = _command_parser(parser, args.command)
            setattr(args, OPTION_LABELS, experiment.labels(given_on_command_line(command, experiment.argv)))
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


def _command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of the sub-command `name`."""
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return subparsers.choices[name]


def _with_experiment(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], Experiment | None]:
    """argv with the keys of the experiment file given to its command (`--experiment FILE`) put in as flags."""
    names = [token for token in argv if not token.startswith("-")]
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    if not names or names[0] not in subparsers.choices:
        return argv, None
    at = argv.index(names[0])
    rest, experiment = expand(subparsers.choices[names[0]], argv[at + 1:])
    return [*argv[:at + 1], *rest], experiment


if __name__ == "__main__":
    sys.exit(main())
