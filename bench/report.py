"""The suite's output: machine facts, the JSON document, and the table printed (and pasted in the README)."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from bench.figures import Row

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str | None:
    """The checked-out commit, read from .git (a worktree's .git file points at its git dir); None outside git."""
    git = ROOT / ".git"
    if git.is_file():
        git = Path(git.read_text().split(":", 1)[1].strip())
    try:
        head = (git / "HEAD").read_text().strip()
    except OSError:
        return None
    if not head.startswith("ref: "):
        return head
    ref = head.removeprefix("ref: ")
    folders = [git] + ([git / (git / "commondir").read_text().strip()] if (git / "commondir").is_file() else [])
    for folder in folders:
        if (folder / ref).is_file():
            return (folder / ref).read_text().strip()
        packed = folder / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + ref):
                    return line.split()[0]
    return None


def machine() -> dict[str, object]:
    """What the figures depend on besides the code: cores, CPU, memory, Python, platform, commit."""
    cpu = next((line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    memory_kib = next((int(line.split()[1]) for line in _lines("/proc/meminfo") if line.startswith("MemTotal")), None)
    return {"cores": os.cpu_count(), "cpu": cpu,
            "memory_gib": round(memory_kib / 2**20, 1) if memory_kib else None,
            "python": platform.python_version(), "platform": platform.platform(), "commit": commit()}


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def table(rows: dict[str, list[Row]]) -> str:
    """A Markdown table of every benchmark's rows."""
    lines = ["| benchmark | figure | netdp | floor (same run) | ratio | target |", "|---|---|---|---|---|---|"]
    for name, benchmark_rows in rows.items():
        for row in benchmark_rows:
            ratio = "" if row.ratio is None else f"{row.ratio:.2f}×"
            lines.append(f"| {name} | {row.figure} | {row.value} | {row.floor} | {ratio} | {row.target} |")
    return "\n".join(lines)


def write(document: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
