"""What a sweep folder's files hold, as pydantic models: one point's row (row.json, a line of sweep.csv) and sweep.json.

`write_row` and `write_sweep` build their documents through these models, so a row that lacks a column, or
holds a value of the wrong kind, is refused before it is written; `read_row` gives the row back checked.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coordinator_tools.sweep.grid import SweepGrid

Schema = Literal["netdp.sweep/1"]
SCHEMA: Schema = "netdp.sweep/1"


class SweepRow(BaseModel):
    """One finished point: what ran, its seeds, its utility and its losses (a line of sweep.csv)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    point: str = Field(description="the point's id, e.g. muffliato_hypercube_n16_T4_sigma1")
    protocol: str = Field(description="the protocol that ran")
    graph: str = Field(description="the graph kind")
    n: int = Field(description="number of nodes")
    T: int = Field(description="the published length: rounds (averaging) or gradient steps (learning)")
    sigma: float = Field(description="noise std per draw (calibrated, for a point with a target)")
    target_eps: float | None = Field(description="the target mean ε at delta the point was calibrated to, or null")
    delta: float = Field(description="δ of every ε")
    mode: Literal["virtual", "networked"] = Field(description="virtual run, or real node processes on loopback")
    graph_seed: int | None = Field(description="seed of the graph (null: a deterministic graph kind)")
    data_seed: int = Field(description="seed of the nodes' data")
    noise_seed: int = Field(description="seed of the simulation sampler's noise")
    attack_seed: int = Field(description="seed of the audit's model attack")
    utility_metric: str = Field(description='"mse" (averaging) or the learning task\'s test metric')
    utility: float = Field(description="the run's utility in that metric")
    baseline_utility: float = Field(description="the trusted aggregator's utility at the same noise")
    mean_exact_eps: float = Field(description="max over observers of the mean exact ε (upper end) over sources")
    worst_exact_eps: float = Field(description="the largest exact ε (upper end) of any pair")
    mean_paper_eps: float | None = Field(description="the same mean of the paper's closed form (null: none)")
    ldp_eps: float = Field(description="the local-DP baseline's ε")
    central_eps: float = Field(description="the central-DP baseline's ε")
    mean_exact_rdp: float = Field(description="the largest per-observer mean exact RDP (upper end)")
    alpha: float = Field(description="Rényi order of the RDP values")
    elapsed_s: float = Field(description="wall time of the point, in seconds")
    checks_ok: bool = Field(description="every check of the point's audit passed")


COLUMNS = tuple(SweepRow.model_fields)  # sweep.csv's columns, in order


class SweepPointEntry(BaseModel):
    """One point of sweep.json: its parameters and seeds, its folder and its status."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="the point's id")
    protocol: str = Field(description="the protocol")
    graph: str = Field(description="the graph kind")
    n: int = Field(description="number of nodes asked for")
    length: int | None = Field(description="T (null: muffliato's T_stop at the point's sigma)")
    sigma: float | None = Field(description="noise std (null: calibrated to target_eps)")
    target_eps: float | None = Field(description="target mean ε at delta, or null")
    graph_seed: int | None = Field(description="seed of the graph (null: a deterministic graph kind)")
    data_seed: int = Field(description="seed of the nodes' data")
    noise_seed: int = Field(description="seed of the noise")
    attack_seed: int = Field(description="seed of the model attack")
    folder: str = Field(description="the point's folder, relative to the sweep's")
    status: Literal["done", "pending", "failed"] = Field(description="finished, not yet run, or failed")
    error: str | None = Field(default=None, exclude_if=lambda error: error is None,
                              description="why the point failed (present only when it did)")


class SweepDocument(BaseModel):
    """sweep.json: the grid as given, and every point."""

    model_config = ConfigDict(extra="forbid")

    schema_: Schema = Field(SCHEMA, alias="schema", description='`"netdp.sweep/1"`')
    grid: SweepGrid = Field(description="the grid, with the field names of a --grid file")
    points: list[SweepPointEntry] = Field(description="every point of the grid, in order")
