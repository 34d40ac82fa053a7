"""What a protocol's node module or a learning task may use: netdp's public API for plug-ins.

A protocol that lives in its own package imports from here (and from `coordinator_tools.audit.plugin`
for its auditor), nothing else of netdp, and registers a `ProtocolPlugin` in the `netdp.protocols`
entry-point group of its pyproject.toml; a learning task registers a `TaskPlugin` (its `TaskSpec` and
dataset loaders) in `netdp.tasks`. docs/plugin-protocol.md walks through an example of each.
"""

from __future__ import annotations

from node.context import ProtocolContext
from node.data import clip_to_ball
from node.protocols.base import (
    GraphShape,
    NodeOutput,
    ProtocolNode,
    ProtocolPlugin,
    ProtocolSpec,
    SweepShape,
)
from node.protocols.gossip import BarrierRounds, mix
from node.protocols.params import NoisyVectorParams
from node.tasks.base import FloatArray, RawExamples, TaskPlugin, TaskSpec
from node.topology import NetworkParams, Topology

__all__ = [
    "BarrierRounds",
    "FloatArray",
    "GraphShape",
    "NetworkParams",
    "NodeOutput",
    "NoisyVectorParams",
    "ProtocolContext",
    "ProtocolNode",
    "ProtocolPlugin",
    "ProtocolSpec",
    "RawExamples",
    "SweepShape",
    "TaskPlugin",
    "TaskSpec",
    "Topology",
    "clip_to_ball",
    "mix",
]
