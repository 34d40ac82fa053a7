"""What a protocol's auditor may use: netdp's public API for auditing a protocol plug-in.

A synchronous round protocol whose values are linear in the inputs and Gaussian draws subclasses
`LinearRoundAuditor` and gives each value's row (`LinearRows`) from the realized `Transcript`, per
(sender, round) or, where a round's value differs per receiver, per `Addressed` value;
netdp does the rest (records, transcript, exact column, payload check, plan, utility). Any other
protocol implements `ProtocolAuditor` itself, building its `LinearGaussianModel` for the exact
column and accounting it with `account_model`.
"""

from __future__ import annotations

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.plan import Plan, PlanOptions
from coordinator_tools.audit.protocols.base import ProtocolAuditor
from coordinator_tools.audit.protocols.linear_rounds import Addressed, LinearRoundAuditor, LinearRows
from coordinator_tools.audit.protocols.muffliato.transcript import Message, Transcript
from coordinator_tools.audit.realized import RealizedRun

__all__ = [
    "AccountingOptions",
    "Addressed",
    "LinearGaussianModel",
    "LinearRoundAuditor",
    "LinearRows",
    "Message",
    "PairwiseLosses",
    "Plan",
    "PlanOptions",
    "ProtocolAuditor",
    "RealizedRun",
    "Transcript",
    "account_model",
]
