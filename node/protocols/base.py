"""The contract between the node host and a protocol module.

A protocol module publishes a `ProtocolSpec`: its name, its pydantic Params model,
`load(path, params)`, which reads and checks the node's private data file (a vector for the
averaging protocols, a local dataset for the learning ones), and `start(context, data)`,
which registers the protocol's mailboxes (before the node serves anyone) and returns the
object whose `run()` is the node's part of the protocol. A `resumable` protocol's node rebuilds
its state from its own logs when it is restarted (`ProtocolContext.journal.resumed`); every
other protocol's restarted node is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pydantic import BaseModel

from node.data import load_vector

if TYPE_CHECKING:
    from node.context import ProtocolContext


@dataclass(frozen=True)
class NodeOutput:
    """What a protocol hands back when its node is done: the output and the local steps it completed."""

    value: np.ndarray
    steps_completed: int


class ProtocolNode(Protocol):
    """A node's part of a protocol, ready to run once its mailboxes are registered."""

    async def run(self) -> NodeOutput: ...


def load_private_vector(path: Path, params: Any) -> np.ndarray:
    """The private vector of the averaging protocols, of the published dimension."""
    return load_vector(path, params.dimension)


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol as the node host sees it."""

    name: str
    params: type[BaseModel]
    start: Callable[["ProtocolContext", Any], ProtocolNode]
    load: Callable[[Path, Any], Any] = load_private_vector
    resumable: bool = False  # a restarted node may rejoin its run from its logs
