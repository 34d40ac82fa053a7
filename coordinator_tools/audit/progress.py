"""Progress bars for the auditor's long steps (per-observer geometry, the paper column, the attack).

Drawn on stderr only when it is a terminal, so reports, captured output and piped runs see nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

CONSOLE = Console(stderr=True)
ItemT = TypeVar("ItemT")


def tracked(items: Iterable[ItemT], label: str, total: int) -> Iterator[ItemT]:
    """Yield `items`, advancing a transient bar labelled `label` out of `total`."""
    bar = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=CONSOLE, transient=True, disable=not CONSOLE.is_terminal)
    with bar:
        task = bar.add_task(label, total=total)
        for item in items:
            yield item
            bar.advance(task)
