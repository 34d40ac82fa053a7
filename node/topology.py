"""The published topology: the one file every node loads.

It names the nodes and their addresses, the undirected edges with their gossip weights,
the protocol and its public parameters, and the run id. Everything in it is public;
nothing private to a node may ever be written here.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from node.schema import load_model, save_model

Weighting = Literal["metropolis", "min_degree", "explicit"]
FORMAT_VERSION = 1
ROW_SUM_TOLERANCE = 1e-9


class NodeSpec(BaseModel):
    """One peer: its id (0..n-1) and the host:port its gRPC server listens on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int = Field(ge=0)
    address: str

    @field_validator("address")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected 'host:port' with a port in 1..65535, got {value!r}")
        return value


class Edge(BaseModel):
    """An undirected edge u < v with its (symmetric) gossip weight W_uv = W_vu."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    u: int = Field(ge=0)
    v: int = Field(ge=0)
    weight: float = Field(gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _ordered(self) -> "Edge":
        if self.u >= self.v:
            raise ValueError(f"edge needs u < v (no self-loops), got ({self.u}, {self.v})")
        return self


class MuffliatoParams(BaseModel):
    """Public parameters of synchronous Muffliato (Alg. 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["muffliato"] = "muffliato"
    sigma: float = Field(ge=0.0, description="std of the Gaussian noise each node adds once")
    sensitivity: float = Field(gt=0.0, description="l2 sensitivity; inputs are clipped to norm sensitivity/2")
    alpha: float = Field(gt=1.0, description="Renyi order used in reports")
    rounds: int = Field(ge=1, description="number of gossip rounds T")
    accelerated: bool = Field(True, description="Chebyshev acceleration (Muffliato Def. 3)")
    dimension: int = Field(ge=1, description="length D of every node's vector")


class NetworkParams(BaseModel):
    """Timing of the barrier: how long a node waits before it declares a neighbour dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    round_deadline_s: float = Field(5.0, gt=0.0, description="wait for a round's values before dropping a peer")
    startup_deadline_s: float = Field(60.0, gt=0.0, description="wait for round 0, while peers start")
    patience_factor: float = Field(
        5.0, ge=1.0, le=100.0,
        description="a neighbour that acknowledged our value is waited for up to this many deadlines")
    send_attempts: int = Field(3, ge=1, le=20, description="delivery attempts per message")
    max_message_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="largest payload a node accepts")
    chunk_bytes: int = Field(1024 * 1024, ge=1024, le=4 * 1024 * 1024 - 4096, description="stream chunk size")


class Topology(BaseModel):
    """The whole published topology file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = FORMAT_VERSION
    run_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    graph: str = Field(description="how the graph was made, e.g. 'hypercube' or 'file:edges.txt'")
    graph_seed: int | None = Field(None, description="public seed of a random generator")
    nodes: list[NodeSpec] = Field(min_length=2)
    edges: list[Edge] = Field(min_length=1)
    weighting: Weighting = "metropolis"
    spectral_gap: float = Field(gt=0.0, le=1.0, description="lambda_W = 1 - max(|lambda_2|, |lambda_n|)")
    gamma: float = Field(gt=0.0, le=2.0, description="1 - lambda_2")
    protocol: MuffliatoParams
    network: NetworkParams = NetworkParams()

    @model_validator(mode="after")
    def _consistent(self) -> "Topology":
        ids = [node.id for node in self.nodes]
        if ids != list(range(len(ids))):
            raise ValueError("nodes must be listed with ids 0..n-1 in order")
        addresses = [node.address for node in self.nodes]
        if len(set(addresses)) != len(addresses):
            raise ValueError("two nodes share an address")
        n = len(ids)
        seen: set[tuple[int, int]] = set()
        row_sums = np.zeros(n)
        for edge in self.edges:
            if edge.v >= n:
                raise ValueError(f"edge ({edge.u}, {edge.v}) names a node that does not exist (n = {n})")
            if (edge.u, edge.v) in seen:
                raise ValueError(f"edge ({edge.u}, {edge.v}) is listed twice")
            seen.add((edge.u, edge.v))
            row_sums[edge.u] += edge.weight
            row_sums[edge.v] += edge.weight
        worst = int(np.argmax(row_sums))
        if row_sums[worst] > 1.0 + ROW_SUM_TOLERANCE:
            raise ValueError(f"weights of node {worst} sum to {row_sums[worst]:.6f} > 1")
        isolated = [v for v in range(n) if row_sums[v] == 0.0]
        if isolated:
            raise ValueError(f"node {isolated[0]} has no edge")
        return self

    @property
    def n(self) -> int:
        return len(self.nodes)

    @cached_property
    def neighbours(self) -> tuple[tuple[int, ...], ...]:
        """Sorted neighbour ids of every node."""
        adjacency: list[list[int]] = [[] for _ in range(self.n)]
        for edge in self.edges:
            adjacency[edge.u].append(edge.v)
            adjacency[edge.v].append(edge.u)
        return tuple(tuple(sorted(row)) for row in adjacency)

    @cached_property
    def edge_weights(self) -> dict[tuple[int, int], float]:
        """W_uv for both orientations of every edge."""
        weights: dict[tuple[int, int], float] = {}
        for edge in self.edges:
            weights[(edge.u, edge.v)] = edge.weight
            weights[(edge.v, edge.u)] = edge.weight
        return weights

    def weight_row(self, node: int) -> dict[int, float]:
        """Row `node` of W as {peer: weight}, self weight included."""
        row = {peer: self.edge_weights[(node, peer)] for peer in self.neighbours[node]}
        row[node] = 1.0 - sum(row.values())
        return row

    def gossip_matrix(self) -> sp.csr_matrix:
        """W as a sparse symmetric, doubly stochastic matrix."""
        rows = [e.u for e in self.edges] + [e.v for e in self.edges]
        cols = [e.v for e in self.edges] + [e.u for e in self.edges]
        vals = [e.weight for e in self.edges] * 2
        off = sp.csr_matrix((vals, (rows, cols)), shape=(self.n, self.n))
        diagonal = 1.0 - np.asarray(off.sum(axis=1)).ravel()
        return (off + sp.diags(diagonal)).tocsr()

    def address_of(self, node: int) -> str:
        return self.nodes[node].address

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON form: every log records it to bind views to one topology."""
        return hashlib.sha256(self.model_dump_json().encode("utf-8")).hexdigest()

    def public_parameters_json(self) -> str:
        """Protocol and network parameters as JSON, for the run header of every log."""
        return self.model_dump_json(include={"protocol", "network", "weighting", "spectral_gap", "gamma"})


def replace_fields(topology: Topology, **changes: object) -> Topology:
    """A validated copy with some fields changed (model_copy would skip validation and keep caches)."""
    return Topology.model_validate({**topology.model_dump(), **changes})


def load_topology(path: Path) -> Topology:
    """Read and validate a topology file; a bad file raises ConfigError naming the field."""
    return load_model(Topology, path)


def save_topology(topology: Topology, path: Path) -> None:
    save_model(topology, path)
