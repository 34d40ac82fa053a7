"""What a reproduction declares and what it returns: published values, measured values, verdicts, deviations.

A `Row` puts one quantity the paper publishes beside what netdp measured on its runs, with the
tolerance the comparison is judged by; `agrees` is None where the paper gives only a shape (a
trend, an ordering) that the row's note states in words. Where netdp's exact column disagrees
with a published bound, both are rows (and both are drawn): a bound that undercounts is shown,
not hidden.

A referee needs to tell a finding from a substitution, so every comparison row carries a
`Verdict` (reproduced, differs because of a stated deviation, or a finding: it differs in the
paper's own setting) with its evidence, every outcome lists its `Deviation`s from the paper's
setup, and where a theorem's statement and its proof give different values both are kept
(`StatementVsProof`), with the one netdp uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from matplotlib.figure import Figure

Scale = Literal["quick", "full"]
VerdictKind = Literal["reproduced", "differs (stated deviation)", "finding"]
REPRODUCED: VerdictKind = "reproduced"
DIFFERS: VerdictKind = "differs (stated deviation)"
FINDING: VerdictKind = "finding"
# A reproduction's overall verdict is its most serious row's: a finding outranks a stated deviation.
SEVERITY: dict[VerdictKind, int] = {REPRODUCED: 0, DIFFERS: 1, FINDING: 2}


@dataclass(frozen=True)
class Verdict:
    """How one row compares with the paper, and the sentence (with its numbers) that shows it."""

    kind: VerdictKind
    evidence: str


@dataclass(frozen=True)
class Deviation:
    """One way netdp's runs differ from the paper's setup, or a choice the paper leaves open."""

    aspect: str  # dataset, n, rounds, clipping, calibration, seeds, unspecified, ...
    paper: str  # what the paper did ("not specified" where it is silent)
    netdp: str  # what netdp ran
    why: str = ""


@dataclass(frozen=True)
class StatementVsProof:
    """A theorem whose statement and proof give different values on the run: both, and which netdp uses."""

    theorem: str
    statement: str  # the stated formula or reading
    statement_value: float | None  # None: the statement gives no number in this setting
    proof: str  # what the proof supports
    proof_value: float | None  # None: the proof does not cover this setting
    used: str  # the value netdp's audit or accounting uses ("statement", "proof", "exact column", ...)
    why: str


@dataclass(frozen=True)
class Row:
    """One published quantity beside netdp's measurement of it."""

    quantity: str  # what is compared, e.g. "mean exact eps at hop 1, hypercube"
    published: float | None  # the paper's value (None: the paper shows a curve only, see `note`)
    measured: float
    unit: str = ""  # "eps at delta=1e-5", "RDP at alpha=2", "accuracy", ...
    rtol: float | None = None  # relative tolerance of the comparison (None: not a numeric match)
    note: str = ""  # where the number comes from, or what shape the paper shows
    verdict: Verdict | None = None  # None on a numeric row: judged by `agrees` (see `judged`); else context only

    @property
    def judged(self) -> Verdict | None:
        """The row's verdict: the stated one, else from `agrees` (a miss nobody explained is a finding); None for a
        row with nothing published to compare (context for the other rows)."""
        if self.verdict is not None or self.agrees is None:
            return self.verdict
        compared = f"netdp {self.measured:.4g} against the paper's {self.published:.4g} (rtol {self.rtol:g})"
        if self.agrees:
            return Verdict(REPRODUCED, f"{compared}.")
        return Verdict(FINDING, f"{compared}: outside the tolerance in the paper's own setting.")

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
    deviations: Sequence[Deviation] = ()  # every way the runs differ from the paper's setup
    statement_vs_proof: Sequence[StatementVsProof] = ()  # theorems whose statement and proof disagree here

    @property
    def verdict(self) -> VerdictKind:
        """The most serious verdict over the rows (reproduced when every judged row reproduces)."""
        kinds = [row.judged.kind for row in self.rows if row.judged is not None]
        return max(kinds, key=SEVERITY.__getitem__, default=REPRODUCED)


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
