"""README.md stays a short front page whose commands CI reads; the docs site's CLI page covers every command."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from coordinator_tools.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LIMIT = 15_000  # bytes: the front page; everything else lives in docs/
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def _line_after(marker: re.Pattern[str]) -> str:
    lines = _lines()
    found = [i for i, line in enumerate(lines) if marker.fullmatch(line)]
    assert len(found) == 1, f"README.md needs exactly one line matching {marker.pattern!r}, has {len(found)}"
    return lines[found[0] + 1]


def test_readme_is_under_the_size_limit() -> None:
    size = len(README.read_bytes())
    assert size < LIMIT, f"README.md is {size} bytes; move detail into docs/"


def test_readme_keeps_the_test_command_ci_runs() -> None:
    # .ci/run greps '^# netdp: test command$' and evaluates the next line
    command = _line_after(re.compile(r"# netdp: test command"))
    assert "pytest" in command and ".[dev]" in command


def test_readme_keeps_the_demo_command() -> None:
    command = _line_after(re.compile(r"# netdp: demo command \(.+\)"))
    assert command.endswith("netdp demo")


def test_readme_relative_links_point_at_existing_files() -> None:
    targets = [t for t in LINK.findall(README.read_text(encoding="utf-8")) if "://" not in t and not t.startswith("#")]
    assert targets, "README.md links to the docs"
    missing = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert missing == []


@pytest.fixture(scope="module")
def cli_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_cli_hook", ROOT / "docs" / "hooks" / "cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_has_every_command_with_its_help(cli_hook: ModuleType) -> None:
    page = cli_hook.cli_reference()
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in subparsers.choices:
        assert f"## `netdp {name}`" in page
        assert f"usage: netdp {name} " in page
    assert "## `netdp-node`" in page
    assert "--target-mean-eps" in page  # an option of `netdp plan`, deep in a sub-command's help
