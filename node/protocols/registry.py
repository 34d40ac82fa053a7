"""Every protocol a node can run, by the name the published topology gives."""

from __future__ import annotations

from node.errors import ConfigError
from node.protocols import (
    muffliato,
    muffliato_async,
    muffliato_gd,
    personalized_cd,
    ring_histogram,
    ring_sum,
    rw_sgd,
    walk_sum,
)
from node.protocols.base import ProtocolSpec

PROTOCOLS: dict[str, ProtocolSpec] = {
    spec.name: spec for spec in (muffliato.SPEC, muffliato_async.SPEC, muffliato_gd.SPEC, ring_sum.SPEC, walk_sum.SPEC,
                                    rw_sgd.SPEC, ring_histogram.SPEC, personalized_cd.SPEC)
}


def protocol_spec(name: str) -> ProtocolSpec:
    """The protocol called `name`; a one-line error naming the known ones otherwise."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ConfigError(f"unknown protocol {name!r}; this node runs {', '.join(sorted(PROTOCOLS))}") from None
