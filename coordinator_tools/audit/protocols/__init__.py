"""Every protocol the auditor can read, by the name its logs' headers and topologies give.

Each registered protocol (`node.protocols.registry`) names its `ProtocolAuditor`; the replay
picks the one that `supports` a header, and an unknown protocol is a one-line error naming it.
An auditor is imported the first time an audit asks for it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from coordinator_tools.audit.protocols.base import ProtocolAuditor
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError
from node.protocols.registry import load_attribute, plugins


@cache
def registered_auditor(protocol: str) -> ProtocolAuditor[Any]:
    """The auditor the protocol called `protocol` registers (imported once)."""
    plugin = plugins()[protocol]
    auditor = load_attribute(plugin.auditor)
    if not isinstance(auditor, ProtocolAuditor) or auditor.name != protocol:
        raise ConfigError(f"protocol {protocol!r} registers {plugin.auditor}, which is not a ProtocolAuditor "
                          f"named {protocol!r}")
    return auditor


def auditor_for(header: viewlog_pb2.RunHeader) -> ProtocolAuditor[Any]:
    """The auditor that reads logs with this header; ConfigError naming the protocol otherwise.

    The protocol the header names is asked first: another protocol's auditor is imported only if it does not read it.
    """
    for name in sorted(plugins(), key=lambda name: name != header.protocol):
        auditor = registered_auditor(name)
        if auditor.supports(header):
            return auditor
    raise ConfigError(f"protocol {header.protocol!r} has no auditor; netdp audits {', '.join(plugins())}")


def auditor_named(protocol: str) -> ProtocolAuditor[Any]:
    """The auditor of the protocol a topology names."""
    return auditor_for(viewlog_pb2.RunHeader(protocol=protocol))
