"""MkDocs hook: the CLI reference page, generated at build time from the commands' own argparse parsers.

Generating it from `build_parser` of `coordinator_tools.cli` (`netdp`) and `node.cli` (`netdp-node`) at
every build keeps the page equal to what `--help` prints: no copy to fall behind the parsers.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Iterator

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "reference/cli.md"
WIDTH = "100"  # argparse wraps the help text at $COLUMNS
PROGRAMS = (("netdp", "coordinator_tools.cli"), ("netdp-node", "node.cli"))  # each module has build_parser()


def _commands(parser: argparse.ArgumentParser, prog: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command and sub-command of the parser, depth first, each once (aliases skipped)."""
    yield prog, parser
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from _commands(sub, f"{prog} {name}")


def cli_reference() -> str:
    """The page: one section per command with its `--help` text."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        commands = [command for prog, module in PROGRAMS
                    for command in _commands(importlib.import_module(module).build_parser(), prog)]
        sections = [f"## `{prog}`\n\n```text\n{sub.format_help().rstrip()}\n```\n" for prog, sub in commands]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return (
        "# CLI reference\n\n"
        "Every `netdp` command, and `netdp-node` (one node, what `netdp run` starts per address), with the help "
        "it prints (`--help`), generated from the parsers when this site is built. Options that apply to some "
        "protocols only say which (the contents list beside this page goes to each command).\n\n"
        + "\n".join(sections)
    )


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated CLI reference to the site's files."""
    files.append(File.generated(config, PAGE, content=cli_reference()))
    return files
