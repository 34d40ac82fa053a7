"""Every protocol the auditor can read, by the name its logs' headers and topologies give.

A protocol registers by adding its `ProtocolAuditor` to `AUDITORS`; the replay picks the one
that `supports` a header, and an unknown protocol is a one-line error naming it.
"""

from __future__ import annotations

from coordinator_tools.audit.protocols.base import ProtocolAuditor
from coordinator_tools.audit.protocols.muffliato import MuffliatoAuditor
from coordinator_tools.audit.protocols.muffliato_async import MuffliatoAsyncAuditor
from coordinator_tools.audit.protocols.muffliato_gd import MuffliatoGDAuditor
from coordinator_tools.audit.protocols.personalized_cd import PersonalizedCDAuditor
from coordinator_tools.audit.protocols.rw_sgd import RwSgdAuditor
from coordinator_tools.audit.protocols.token_sum import RingHistogramAuditor, RingSumAuditor, WalkSumAuditor
from netdp.v1 import viewlog_pb2
from node.errors import ConfigError

AUDITORS: tuple[ProtocolAuditor, ...] = (MuffliatoAuditor(), MuffliatoAsyncAuditor(), MuffliatoGDAuditor(),
                                          RingSumAuditor(), WalkSumAuditor(), RwSgdAuditor(), RingHistogramAuditor(),
                                          PersonalizedCDAuditor())


def auditor_for(header: viewlog_pb2.RunHeader) -> ProtocolAuditor:
    """The auditor that reads logs with this header; ConfigError naming the protocol otherwise."""
    for auditor in AUDITORS:
        if auditor.supports(header):
            return auditor
    known = ", ".join(auditor.name for auditor in AUDITORS)
    raise ConfigError(f"protocol {header.protocol!r} has no auditor; netdp audits {known}")


def auditor_named(protocol: str) -> ProtocolAuditor:
    """The auditor of the protocol a topology names."""
    return auditor_for(viewlog_pb2.RunHeader(protocol=protocol))
