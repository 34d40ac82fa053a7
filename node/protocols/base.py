"""The contract between netdp and a protocol: what one protocol registers, once.

A protocol module publishes a `ProtocolSpec`: its name, its pydantic Params model (with a
`name` literal, which the published topology dispatches on), the graph shapes it runs on and
a check of the one graph it is given, whether its noise is Gaussian, `load(path, params)`,
which reads and checks the node's private data file (a vector for the averaging protocols, a
local dataset for the learning ones), and `start(context, data)`, which registers the
protocol's mailboxes (before the node serves anyone) and returns the object whose `run()` is
the node's part of the protocol. A `resumable` protocol's node rebuilds its state from its own
logs when it is restarted (`ProtocolContext.journal.resumed`); every other protocol's
restarted node is refused.

The spec and the coordinator's parts of the protocol (its auditor, and optionally its
command-line options and demo, named by import path so that a node never imports the
coordinator's tools) make one `ProtocolPlugin`, which the protocol registers under its name in
the `netdp.protocols` entry-point group (`node.protocols.registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np
from pydantic import BaseModel

from node.data import load_vector

if TYPE_CHECKING:
    from node.context import ProtocolContext
    from node.protocols.params import NoisyVectorParams
    from node.topology import Topology

GraphShape = Literal["undirected", "directed", "erdos_renyi"]
P = TypeVar("P", bound=BaseModel)  # a protocol's Params model
D = TypeVar("D")  # what its `load` reads from a node's private data file


@runtime_checkable
class PublishedParams(Protocol):
    """What netdp reads off every protocol's Params before it knows which protocol they are (`Topology.published`)."""

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int:
        """The length of a node's output (its data coordinates)."""
        ...

    @property
    def vector_length(self) -> int:
        """The length of every vector the protocol sends (data coordinates, then any canary coordinates)."""
        ...


@dataclass(frozen=True)
class NodeOutput:
    """What a protocol hands back when its node is done: the output and the local steps it completed."""

    value: np.ndarray
    steps_completed: int


class ProtocolNode(Protocol):
    """A node's part of a protocol, ready to run once its mailboxes are registered."""

    async def run(self) -> NodeOutput: ...


def load_private_vector(path: Path, params: NoisyVectorParams) -> np.ndarray:
    """The private vector of the averaging protocols, of the published dimension."""
    return load_vector(path, params.dimension)


def any_graph(topology: Topology) -> None:
    """The graph check of a protocol that runs on every graph of its shapes."""


@dataclass(frozen=True)
class SweepShape:
    """How `netdp sweep` varies a protocol: its family and its length.

    An averaging point publishes the protocol's Params from σ, the dimension and T, on synthetic vectors; a
    learning point is `netdp compare`'s learning setup, whose Params are Muffliato-GD's.
    """

    family: Literal["averaging", "learning"]
    length_field: str  # the Params field that is the sweep's T (rounds, ticks per node, gradient steps)
    length_required: bool = False  # a point must give T (the protocol has no default length of its own)


@dataclass(frozen=True)
class ProtocolSpec(Generic[P, D]):
    """One protocol as a node sees it: checked when a topology is loaded, run by the node host.

    `P` is its Params model (what `ProtocolContext[P].params` is), `D` the private data its `load` reads and its
    `start` takes; the default `load` reads the private vector of a `NoisyVectorParams` protocol.
    """

    name: str
    params: type[P]
    start: Callable[[ProtocolContext[P], D], ProtocolNode]
    load: Callable[[Path, P], D] = load_private_vector  # type: ignore[assignment]  # the vector protocols' default
    resumable: bool = False  # a restarted node may rejoin its run from its logs
    graphs: frozenset[GraphShape] = frozenset({"undirected"})  # the graph shapes it runs on
    check_graph: Callable[[Topology], None] = any_graph  # raises ValueError saying why this graph will not do
    gaussian: bool = True  # its noise is Gaussian (the node gets a Gaussian sampler, not Laplace or RR)
    sweep: SweepShape | None = None  # None: `netdp sweep` does not run it


@dataclass(frozen=True)
class ProtocolPlugin(Generic[P, D]):
    """What one entry of the `netdp.protocols` group registers: the node's spec and the coordinator's parts.

    The coordinator's parts are "module:attribute" paths, imported only when a command needs them: `auditor`
    (a `ProtocolAuditor` instance), `options` (its `ProtocolOptions` for `netdp topology generate`; None: one
    option per Params field, from the field's type, default and description) and `demo` (its `netdp demo`).
    """

    spec: ProtocolSpec[P, D]
    auditor: str
    options: str | None = None
    demo: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name
