"""`netdp --help` and `netdp --version` import no command's module (numpy, the accountants, matplotlib stay
unloaded), and the command list they show is each module's own help."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from coordinator_tools import cli

LISTED_ONLY = ("import json, sys\n"
               "from coordinator_tools import cli\n"
               "try:\n"
               "    cli.main([sys.argv[1]])\n"
               "except SystemExit:\n"
               "    pass\n"
               "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n")


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_listing_the_commands_imports_none_of_them(flag: str) -> None:
    shown = subprocess.run([sys.executable, "-c", LISTED_ONLY, flag], capture_output=True, text=True, check=True)
    modules = set(json.loads(shown.stderr.strip().splitlines()[-1]))
    heavy = {"numpy", "pydantic", "matplotlib", "grpc", "rich", "coordinator_tools.audit"}
    assert not heavy & modules
    assert {module for module in modules if module.startswith("coordinator_tools")} == {
        "coordinator_tools", "coordinator_tools.cli", "coordinator_tools.experiment"}
    assert shown.stdout.startswith("usage: netdp" if flag == "--help" else "netdp ")


def test_the_listed_help_of_each_command_is_its_modules_own() -> None:
    def listed(parser: argparse.ArgumentParser) -> dict[str, str | None]:
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {choice.dest: choice.help for choice in subparsers._choices_actions}

    assert listed(cli.build_parser()) == listed(cli.build_parser(())) == {
        name: summary for name, (_, summary) in cli.COMMANDS.items()}
