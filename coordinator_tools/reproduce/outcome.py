"""What a reproduction declares and what it returns: published values, measured values, figures.

A `Row` puts one quantity the paper publishes beside what netdp measured on its runs, with the
tolerance the comparison is judged by; `agrees` is None where the paper gives only a shape (a
trend, an ordering) that the row's note states in words. Where netdp's exact column disagrees
with a published bound, both are rows (and both are drawn): a bound that undercounts is shown,
not hidden.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from matplotlib.figure import Figure

Scale = Literal["quick", "full"]


@dataclass(frozen=True)
class Row:
    """One published quantity beside netdp's measurement of it."""

    quantity: str  # what is compared, e.g. "mean exact eps at hop 1, hypercube"
    published: float | None  # the paper's value (None: the paper shows a curve only, see `note`)
    measured: float
    unit: str = ""  # "eps at delta=1e-5", "RDP at alpha=2", "accuracy", ...
    rtol: float | None = None  # relative tolerance of the comparison (None: not a numeric match)
    note: str = ""  # where the number comes from, or what shape the paper shows

    @property
    def agrees(self) -> bool | None:
        """Measured within rtol of published; None when the row is not a numeric comparison."""
        if self.published is None or self.rtol is None:
            return None
        return math.isclose(self.measured, self.published, rel_tol=self.rtol)

    @property
    def ratio(self) -> float | None:
        """measured / published (None without a published value)."""
        if self.published is None or self.published == 0:
            return None
        return self.measured / self.published


@dataclass
class Outcome:
    """What a reproduction measured: its rows, its figures, the runs it made and their seeds."""

    rows: list[Row]
    figures: Mapping[str, Figure] = field(default_factory=dict)  # file stem -> figure
    runs: Sequence[Path] = ()  # run or audit folders made, relative to the reproduction's folder
    seeds: Mapping[str, int] = field(default_factory=dict)  # every seed used, by purpose
    setup: Mapping[str, object] = field(default_factory=dict)  # graph, n, sigma, T, ... as run
    summary: str = ""  # one sentence: does the figure hold on netdp's runs


@dataclass(frozen=True)
class Context:
    """What a reproduction may use: its own empty folder, the scale, a base seed."""

    folder: Path
    scale: Scale
    seed: int

    def subfolder(self, name: str) -> Path:
        path = self.folder / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass(frozen=True)
class Reproduction:
    """One paper figure or table that `netdp reproduce NAME` reruns."""

    name: str  # the command's NAME, e.g. "muffliato-fig1a"
    paper: str  # e.g. "Muffliato (NeurIPS 2022)"
    figure: str  # e.g. "Fig. 1a"
    claim: str  # one sentence: what the paper shows
    run: Callable[[Context], Outcome]
    full_scale: str = ""  # what --scale full runs (the paper's sizes), for --list
    quick_scale: str = ""  # what --scale quick runs, for --list
