"""A reproduction's result.json (`netdp.reproduce/2`) as pydantic models: built through them, read back through them.

`outcome.py` holds what a reproduction module declares (rows with their tolerances, deviations, theorems); this
module is what netdp writes of it, each row judged, so that readers (the console table, summary.json, the page)
use attributes and a document of another shape is refused when read back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coordinator_tools.reproduce.outcome import Row, VerdictKind

Schema = Literal["netdp.reproduce/2"]
SCHEMA: Schema = "netdp.reproduce/2"


class Closed(BaseModel):
    """A block whose keys are all listed; `from_attributes`: built from outcome.py's dataclasses."""

    model_config = ConfigDict(extra="forbid", from_attributes=True)


class ResultRow(Closed):
    """One published quantity beside netdp's measurement of it, judged (a line of table.csv)."""

    quantity: str = Field(description="what is compared, e.g. \"mean exact eps at hop 1, hypercube\"")
    published: float | None = Field(description="the paper's value (null: the paper shows a curve only)")
    measured: float = Field(description="netdp's value")
    unit: str = Field(description="\"eps at delta=1e-5\", \"RDP at alpha=2\", \"accuracy\", ...")
    ratio: float | None = Field(description="measured / published (null without a published value)")
    agrees: bool | None = Field(description="measured within rtol of published (null: not a numeric comparison)")
    rtol: float | None = Field(description="relative tolerance of the comparison (null: not a numeric match)")
    verdict: VerdictKind | None = Field(description="reproduced, differs (stated deviation), or finding; null for a "
                                                    "row with nothing published to compare")
    evidence: str | None = Field(description="the sentence, with its numbers, that shows the verdict")
    note: str = Field(description="where the number comes from, or what shape the paper shows")

    @classmethod
    def judged(cls, row: Row) -> ResultRow:
        """The row as result.json holds it, with its verdict (stated, or from the tolerance)."""
        verdict = row.judged
        return cls(quantity=row.quantity, published=row.published, measured=row.measured, unit=row.unit,
                   ratio=row.ratio, agrees=row.agrees, rtol=row.rtol,
                   verdict=None if verdict is None else verdict.kind,
                   evidence=None if verdict is None else verdict.evidence, note=row.note)


class DeviationEntry(Closed):
    """One way netdp's runs differ from the paper's setup, or a choice the paper leaves open."""

    aspect: str = Field(description="dataset, n, rounds, clipping, calibration, seeds, unspecified, ...")
    paper: str = Field(description="what the paper did (\"not specified\" where it is silent)")
    netdp: str = Field(description="what netdp ran")
    why: str = Field(description="why they differ")


class StatementVsProofEntry(Closed):
    """A theorem whose statement and proof give different values on the run: both, and which netdp uses."""

    theorem: str = Field(description="the theorem")
    statement: str = Field(description="the stated formula or reading")
    statement_value: float | None = Field(description="its value (null: the statement gives no number here)")
    proof: str = Field(description="what the proof supports")
    proof_value: float | None = Field(description="its value (null: the proof does not cover this setting)")
    used: str = Field(description="the value netdp uses (\"statement\", \"proof\", \"exact column\", ...)")
    why: str = Field(description="why")


class ReproductionResult(Closed):
    """result.json: what one reproduction ran and measured, beside the paper."""

    schema_: Schema = Field(alias="schema", description='`"netdp.reproduce/2"`')
    name: str = Field(description="the reproduction, as `netdp reproduce NAME` names it")
    paper: str = Field(description="e.g. \"Muffliato (NeurIPS 2022)\"")
    figure: str = Field(description="e.g. \"Fig. 1a\"")
    claim: str = Field(description="what the paper shows, in one sentence")
    scale: Literal["quick", "full"] = Field(description="the scale that ran")
    seed: int = Field(description="the base seed")
    seeds: dict[str, int] = Field(description="every seed used, by purpose")
    setup: dict[str, Any] = Field(description="graph, n, sigma, T, ... as run (open: each reproduction its own)")
    summary: str = Field(description="one sentence: does the figure hold on netdp's runs")
    verdict: VerdictKind = Field(description="the most serious verdict over the rows")
    deviations: list[DeviationEntry] = Field(description="every way the runs differ from the paper's setup")
    statement_vs_proof: list[StatementVsProofEntry] = Field(description="theorems whose statement and proof "
                                                                        "disagree here")
    rows: list[ResultRow] = Field(description="every compared quantity, in the reproduction's order")
    figures: list[str] = Field(description="the PNG files written, relative to the folder")
    runs: list[str] = Field(description="run or audit folders made, relative to the folder")
    elapsed_s: float = Field(description="wall time, in seconds")

    @classmethod
    def read(cls, path: Path) -> ReproductionResult:
        """A result.json read back and checked."""
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def document(self) -> dict[str, Any]:
        """The JSON document, keys as result.json has them."""
        return self.model_dump(by_alias=True)

