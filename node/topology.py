"""The published topology: the one file every node loads.

It names the nodes and their addresses, the graph with its weights, the protocol and its
public parameters, and the run id. Everything in it is public; nothing private to a node
may ever be written here.

The graph is one of three shapes:
* undirected: `edges` u - v with symmetric gossip weights (and the spectral gap of W);
* directed: `arcs` u -> v with weights (a directed ring has arcs only), beside optional edges;
* drawn per step: `schedule` erdos_renyi, a fresh G(n, p) for every step t that each node
  derives by itself from the published seed and t (no edges or arcs are listed).
Walks take their next hop from `transitions` when published, else from a default computed
from the graph (`transition_row`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Final, Literal, Union

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializeAsAny,
    TypeAdapter,
    field_validator,
    model_validator,
)

from node.mixing import edge_weights, metropolis_weight
from node.protocols.base import GraphShape, PublishedParams
from node.protocols.registry import protocol_spec, protocol_specs
from node.schema import load_model, save_model

if TYPE_CHECKING:  # scipy and networkx are imported where they are used: a node process runs without them
    import scipy.sparse as sp

Weighting = Literal["metropolis", "min_degree", "explicit"]


@cache
def _protocol_union() -> TypeAdapter[BaseModel]:
    """Every registered protocol's Params, as one union told apart by `name`: built when a topology is first read."""
    members = tuple(spec.params for spec in protocol_specs())
    # A union known only at run time (the registry's), which no static type describes. Union[members] unpacks the
    # tuple; UP007's rewrite (to `members`) would pass the tuple itself, which Annotated refuses.
    return TypeAdapter(Annotated[Union[members], Field(discriminator="name")])  # type: ignore[arg-type]  # noqa: UP007


def _protocol_params(value: object) -> BaseModel:
    return _protocol_union().validate_python(value)


# The protocol block of a topology: the Params of the protocol its `name` names, among those registered
# (serialized as that Params model, not as the BaseModel this is typed as).
ProtocolParams = Annotated[SerializeAsAny[BaseModel], PlainValidator(_protocol_params)]
FORMAT_VERSION: Final = 1
ROW_SUM_TOLERANCE = 1e-9
STEP_GRAPH_CACHE = 16  # step graphs kept in memory: a node asks for the same few steps repeatedly


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
    def _ordered(self) -> Edge:
        if self.u >= self.v:
            raise ValueError(f"edge needs u < v (no self-loops), got ({self.u}, {self.v})")
        return self


class Arc(BaseModel):
    """A directed link u -> v with its weight W_uv (u may send to v; v does not send back on it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    u: int = Field(ge=0)
    v: int = Field(ge=0)
    weight: float = Field(gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _no_self_loop(self) -> Arc:
        if self.u == self.v:
            raise ValueError(f"arc {self.u} -> {self.v} is a self-loop")
        return self


class Transition(BaseModel):
    """P_uv: the probability that a walk at u moves to v next (v = u: it stays)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    u: int = Field(ge=0)
    v: int = Field(ge=0)
    probability: float = Field(gt=0.0, le=1.0)


class FixedSchedule(BaseModel):
    """The listed edges and arcs, the same at every step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fixed"] = "fixed"


class ErdosRenyiSchedule(BaseModel):
    """A fresh G(n, p) at every step, drawn from SeedSequence([seed, step]) (not redrawn until connected)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["erdos_renyi"] = "erdos_renyi"
    p: float = Field(gt=0.0, le=1.0, description="probability of each edge at each step")
    seed: int = Field(ge=0, description="public seed every node derives each step's graph from")


GraphSchedule = Annotated[FixedSchedule | ErdosRenyiSchedule, Field(discriminator="kind")]


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

    def key_agreed_rounds_s(self, rounds: int) -> float:
        """`netdp run`'s time limit for a protocol that agrees pairwise secrets first: the agreement and every
        round waiting their deadlines twice over."""
        return (rounds + 1) * self.round_deadline_s * 2 + self.startup_deadline_s


@dataclass(frozen=True)
class Links:
    """One graph's directed links: sorted out-neighbours of every node and W_uv of every link u -> v."""

    out_neighbours: tuple[tuple[int, ...], ...]
    weights: Mapping[tuple[int, int], float]

    @classmethod
    def from_weights(cls, n: int, weights: Mapping[tuple[int, int], float]) -> Links:
        adjacency: list[list[int]] = [[] for _ in range(n)]
        for u, v in weights:
            adjacency[u].append(v)
        return cls(tuple(tuple(sorted(row)) for row in adjacency), MappingProxyType(dict(weights)))

    def row(self, node: int) -> dict[int, float]:
        """Row `node` of W as {peer: weight}, self weight (the rest up to 1) included."""
        row = {peer: self.weights[(node, peer)] for peer in self.out_neighbours[node]}
        row[node] = 1.0 - sum(row.values())
        return row

    def matrix(self) -> sp.csr_matrix:
        """W as a sparse row-stochastic matrix (symmetric when every link goes both ways)."""
        import scipy.sparse as sp  # the auditor's need, not a node's: kept out of node processes

        n = len(self.out_neighbours)
        rows, cols = zip(*self.weights) if self.weights else ((), ())
        off = sp.csr_matrix((list(self.weights.values()), (rows, cols)), shape=(n, n))
        diagonal = 1.0 - np.asarray(off.sum(axis=1)).ravel()
        return (off + sp.diags(diagonal)).tocsr()


class Topology(BaseModel):
    """The whole published topology file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = FORMAT_VERSION
    run_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    graph: str = Field(description="how the graph was made, e.g. 'hypercube' or 'file:edges.txt'")
    graph_seed: int | None = Field(None, description="public seed of a random generator")
    nodes: list[NodeSpec] = Field(min_length=2)
    edges: list[Edge] = Field(default_factory=list)
    arcs: list[Arc] = Field(default_factory=list, description="directed links, beside or instead of edges")
    transitions: list[Transition] | None = Field(None, description="a walk's next-hop probabilities")
    schedule: GraphSchedule = FixedSchedule()
    weighting: Weighting = "metropolis"
    spectral_gap: float | None = Field(
        None, gt=0.0, le=1.0, description="lambda_W = 1 - max(|lambda_2|, |lambda_n|); undirected graphs only")
    gamma: float | None = Field(None, gt=0.0, le=2.0, description="1 - lambda_2; undirected graphs only")
    protocol: ProtocolParams
    network: NetworkParams = NetworkParams()

    @property
    def protocol_name(self) -> str:
        """The published protocol's name: its Params' `name` literal, which the protocol block was told apart by."""
        name = getattr(self.protocol, "name", None)
        if not isinstance(name, str):
            raise TypeError(f"{type(self.protocol).__name__} has no name")
        return name

    @property
    def published(self) -> PublishedParams:
        """The protocol block as netdp reads it whatever the protocol: its name, dimension and vector length."""
        if not isinstance(self.protocol, PublishedParams):
            raise TypeError(f"{type(self.protocol).__name__} lacks a name, dimension or vector_length")
        return self.protocol

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        _check_nodes(self.nodes)
        if isinstance(self.schedule, ErdosRenyiSchedule):
            _check_drawn_graph(self)
        else:
            _check_fixed_graph(self)
        if self.transitions is not None:
            _check_transitions(self)
        spec = protocol_spec(self.protocol_name)
        if self.graph_shape not in spec.graphs:
            raise ValueError(f"protocol {self.protocol_name!r} runs on {' or '.join(sorted(spec.graphs))} graphs; "
                             f"this graph is {self.graph_shape.replace('_', '-')}")
        spec.check_graph(self)
        if getattr(self.protocol, "accelerated", False) and self.spectral_gap is None:
            raise ValueError("Chebyshev acceleration needs the spectral gap of a fixed undirected graph; "
                             "use plain gossip (--plain) with a graph drawn per step")
        return self

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def graph_shape(self) -> GraphShape:
        if isinstance(self.schedule, ErdosRenyiSchedule):
            return "erdos_renyi"
        return "directed" if self.arcs else "undirected"

    @cached_property
    def _fixed_links(self) -> Links:
        weights: dict[tuple[int, int], float] = {}
        for edge in self.edges:
            weights[(edge.u, edge.v)] = weights[(edge.v, edge.u)] = edge.weight
        for arc in self.arcs:
            weights[(arc.u, arc.v)] = arc.weight
        return Links.from_weights(self.n, weights)

    @cached_property
    def out_neighbours(self) -> tuple[tuple[int, ...], ...]:
        """Sorted ids every node may send to: its edges' and out-arcs' ends (everyone, on a drawn graph)."""
        if self.graph_shape == "erdos_renyi":
            return self._everyone_else
        return self._fixed_links.out_neighbours

    @cached_property
    def in_neighbours(self) -> tuple[tuple[int, ...], ...]:
        """Sorted ids every node may receive from (everyone, on a drawn graph)."""
        if self.graph_shape == "erdos_renyi":
            return self._everyone_else
        senders: list[list[int]] = [[] for _ in range(self.n)]
        for u, v in self._fixed_links.weights:
            senders[v].append(u)
        return tuple(tuple(sorted(row)) for row in senders)

    @cached_property
    def neighbours(self) -> tuple[tuple[int, ...], ...]:
        """Sorted ids of every peer a node may ever talk to, in either direction, at any step."""
        return tuple(tuple(sorted(set(out) | set(inn))) for out, inn in zip(self.out_neighbours, self.in_neighbours))

    @cached_property
    def _everyone_else(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(w for w in range(self.n) if w != v) for v in range(self.n))

    @cached_property
    def edge_weights(self) -> dict[tuple[int, int], float]:
        """W_uv of every fixed link u -> v: both orientations of every edge, and every arc."""
        return dict(self._fixed_links.weights)

    def weight_row(self, node: int) -> dict[int, float]:
        """Row `node` of the fixed W as {peer: weight}, self weight included."""
        return self._fixed().row(node)

    def gossip_matrix(self) -> sp.csr_matrix:
        """The fixed W as a sparse row-stochastic matrix; symmetric and doubly stochastic when undirected."""
        return self._fixed().matrix()

    def neighbours_at(self, node: int, step: int) -> tuple[int, ...]:
        """Sorted neighbours of `node` in step `step`'s graph; every node derives the same graph by itself."""
        links = self._links_at(step)  # checks the step, and draws its graph on a drawn schedule
        return links.out_neighbours[node] if self.graph_shape == "erdos_renyi" else self.neighbours[node]

    def weight_row_at(self, node: int, step: int) -> dict[int, float]:
        """Row `node` of step `step`'s W (the topology's weighting on that step's graph), self weight included."""
        return self._links_at(step).row(node)

    def gossip_matrix_at(self, step: int) -> sp.csr_matrix:
        """Step `step`'s W: what the auditor replays for a graph drawn per step."""
        return self._links_at(step).matrix()

    def transition_row(self, node: int) -> dict[int, float]:
        """Where a walk at `node` goes next, as {node: probability} over its out-neighbours and itself.

        The published `transitions` when there are any; otherwise Metropolis-Hastings on an
        undirected graph (P_uv = 1/(1 + max(d_u, d_v)), the rest stays: uniform stationary
        distribution, as the random-walk papers assume) or the arcs' own weights on a directed one.
        """
        if self.graph_shape == "erdos_renyi":
            raise ValueError("a graph drawn per step has no transition matrix")
        if self.transitions is not None:
            return {t.v: t.probability for t in self.transitions if t.u == node}
        if self.graph_shape == "directed":
            return {peer: weight for peer, weight in self.weight_row(node).items() if weight > 0.0}
        degree = [len(peers) for peers in self.neighbours]
        row = {peer: metropolis_weight(degree[node], degree[peer]) for peer in self.neighbours[node]}
        stay = 1 - sum(row.values())
        return {peer: float(p) for peer, p in {**row, node: stay}.items() if p > 0}

    def _fixed(self) -> Links:
        if self.graph_shape == "erdos_renyi":
            raise ValueError("the graph is drawn anew every step; ask for a step's weights (weight_row_at)")
        return self._fixed_links

    def _links_at(self, step: int) -> Links:
        """Step `step`'s links: the fixed graph's, or that step's drawn graph."""
        if step < 0:
            raise ValueError(f"steps count from 0, got {step}")
        if not isinstance(self.schedule, ErdosRenyiSchedule):
            return self._fixed_links
        return _erdos_renyi_links(self.n, self.schedule.p, self.schedule.seed, step, self.weighting)

    def address_of(self, node: int) -> str:
        return self.nodes[node].address

    @cached_property
    def digest(self) -> str:
        """sha256 of the canonical JSON form: every log records it to bind views to one topology.

        Computed once per loaded topology (it is frozen): a process hosting thousands of node ids
        would otherwise serialise the whole graph once per id.
        """
        return hashlib.sha256(self.model_dump_json().encode("utf-8")).hexdigest()

    def public_parameters_json(self) -> str:
        """Protocol, graph schedule and network parameters as JSON, for the run header of every log."""
        return self._public_parameters_json

    @cached_property
    def _public_parameters_json(self) -> str:
        return self.model_dump_json(
            include={"protocol", "network", "schedule", "weighting", "spectral_gap", "gamma"})


def erdos_renyi_edges(n: int, p: float, seed: int, step: int) -> list[tuple[int, int]]:
    """The edges u < v of step `step`'s G(n, p): the same on every machine for the same numpy.

    Pairs are visited row by row (0-1, 0-2, ..., 1-2, ...) and each is kept when its draw from
    the stream SeedSequence([seed, step]) is below p.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, step]))
    edges: list[tuple[int, int]] = []
    for u in range(n - 1):
        kept = np.flatnonzero(rng.random(n - 1 - u) < p)
        edges.extend((u, u + 1 + int(offset)) for offset in kept)
    return edges


@lru_cache(maxsize=STEP_GRAPH_CACHE)
def _erdos_renyi_links(n: int, p: float, seed: int, step: int, weighting: str) -> Links:
    import networkx as nx  # only a drawn schedule needs it: kept out of other node processes

    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(erdos_renyi_edges(n, p, seed, step))
    weights: dict[tuple[int, int], float] = {}
    for (u, v), weight in edge_weights(graph, weighting).items():
        weights[(u, v)] = weights[(v, u)] = float(weight)
    return Links.from_weights(n, weights)


def _check_nodes(nodes: list[NodeSpec]) -> None:
    """Ids 0..n-1 in order; ids that share an address are hosted by one process (`hosted_ids`)."""
    if [node.id for node in nodes] != list(range(len(nodes))):
        raise ValueError("nodes must be listed with ids 0..n-1 in order")


def hosted_ids(topology: Topology) -> list[tuple[int, ...]]:
    """The node ids of each process, in order of their lowest id: the ids published at one address."""
    by_address: dict[str, list[int]] = {}
    for node in topology.nodes:
        by_address.setdefault(node.address, []).append(node.id)
    return [tuple(ids) for ids in by_address.values()]


def _check_fixed_graph(topology: Topology) -> None:
    """Links in range and listed once, out-weights of every node at most 1, no node without a way out."""
    n = topology.n
    if not topology.edges and not topology.arcs:
        raise ValueError("a fixed graph needs at least one edge or arc")
    seen: set[tuple[int, int]] = set()
    row_sums = np.zeros(n)
    for edge in topology.edges:
        if edge.v >= n:
            raise ValueError(f"edge ({edge.u}, {edge.v}) names a node that does not exist (n = {n})")
        if (edge.u, edge.v) in seen:
            raise ValueError(f"edge ({edge.u}, {edge.v}) is listed twice")
        seen.update({(edge.u, edge.v), (edge.v, edge.u)})
        row_sums[[edge.u, edge.v]] += edge.weight
    for arc in topology.arcs:
        if max(arc.u, arc.v) >= n:
            raise ValueError(f"arc {arc.u} -> {arc.v} names a node that does not exist (n = {n})")
        if (arc.u, arc.v) in seen:
            raise ValueError(f"arc {arc.u} -> {arc.v} is listed twice (as an arc or an edge)")
        seen.add((arc.u, arc.v))
        row_sums[arc.u] += arc.weight
    worst = int(np.argmax(row_sums))
    if row_sums[worst] > 1.0 + ROW_SUM_TOLERANCE:
        raise ValueError(f"weights of node {worst} sum to {row_sums[worst]:.6f} > 1")
    stuck = [v for v in range(n) if row_sums[v] == 0.0]
    if stuck:
        raise ValueError(f"node {stuck[0]} has no edge" + (" or outgoing arc" if topology.arcs else ""))
    undirected = not topology.arcs
    for name in ("spectral_gap", "gamma"):
        if undirected and getattr(topology, name) is None:
            raise ValueError(f"{name} is required for an undirected graph")
        if not undirected and getattr(topology, name) is not None:
            raise ValueError(f"{name} is only defined for an undirected graph (this one has arcs)")


def _check_drawn_graph(topology: Topology) -> None:
    """A graph drawn per step lists nothing that only a fixed graph has."""
    fixed_only = ("edges", "arcs", "transitions", "spectral_gap", "gamma")
    listed = [name for name in fixed_only if getattr(topology, name) not in (None, [])]
    if listed:
        raise ValueError(f"a graph drawn per step (schedule erdos_renyi) cannot list {', '.join(listed)}")
    if topology.weighting == "explicit":
        raise ValueError("a graph drawn per step needs weighting 'metropolis' or 'min_degree', not 'explicit'")


def _check_transitions(topology: Topology) -> None:
    """Every entry follows a link (or stays), is listed once, and every row sums to 1."""
    assert topology.transitions is not None
    n = topology.n
    seen: set[tuple[int, int]] = set()
    row_sums = np.zeros(n)
    for entry in topology.transitions:
        if max(entry.u, entry.v) >= n:
            raise ValueError(f"transition {entry.u} -> {entry.v} names a node that does not exist (n = {n})")
        if entry.v != entry.u and entry.v not in topology.out_neighbours[entry.u]:
            raise ValueError(f"transition {entry.u} -> {entry.v} follows no edge or arc")
        if (entry.u, entry.v) in seen:
            raise ValueError(f"transition {entry.u} -> {entry.v} is listed twice")
        seen.add((entry.u, entry.v))
        row_sums[entry.u] += entry.probability
    off = np.flatnonzero(np.abs(row_sums - 1.0) > ROW_SUM_TOLERANCE)
    if off.size:
        node = int(off[0])
        raise ValueError(f"transitions out of node {node} sum to {row_sums[node]:.6f}, not 1")


def replace_fields(topology: Topology, **changes: object) -> Topology:
    """A validated copy with some fields changed (model_copy would skip validation and keep caches)."""
    return Topology.model_validate({**topology.model_dump(), **changes})


def load_topology(path: Path) -> Topology:
    """Read and validate a topology file; a bad file raises ConfigError naming the field."""
    return load_model(Topology, path)


def save_topology(topology: Topology, path: Path) -> None:
    save_model(topology, path)
