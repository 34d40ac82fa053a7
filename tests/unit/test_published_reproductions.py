"""The reproductions page the docs publish (docs/reproductions/published): the full-scale one, covering every
reproduction netdp has, each with its verdict, stamped with the commit and machine that made it."""

from __future__ import annotations

import json
import typing
from pathlib import Path

from coordinator_tools.reproduce.outcome import VerdictKind
from coordinator_tools.reproduce.registry import reproductions

PUBLISHED = Path(__file__).resolve().parents[2] / "docs" / "reproductions" / "published"


def test_the_published_page_is_the_full_scale_one_of_every_reproduction_with_its_verdict():
    summary = json.loads((PUBLISHED / "summary.json").read_text(encoding="utf-8"))
    assert summary["scale"] == "full"
    stamp = summary["stamp"]
    assert len(stamp["commit"]) == 40 and stamp["machine"] and stamp["cpus"] >= 1
    assert stamp.get("uncommitted_changes") is False  # the commit alone names the code that ran
    entries = {entry["name"]: entry for entry in summary["reproductions"]}
    assert set(entries) == set(reproductions())
    verdicts = set(typing.get_args(VerdictKind))
    page = (PUBLISHED / "index.html").read_text(encoding="utf-8")
    for name, entry in entries.items():
        assert entry["verdict"] in verdicts
        assert entry["command"] == f"netdp reproduce {name} --scale full --seed {summary['seed']}"
        assert name in page
        result = json.loads((PUBLISHED / entry["folder"] / "result.json").read_text(encoding="utf-8"))
        assert result["scale"] == "full" and result["verdict"] == entry["verdict"]
