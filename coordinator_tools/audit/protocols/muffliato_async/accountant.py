"""Account a randomized Muffliato run: its linear-Gaussian model and every column per pair.

Every node draws its noise once and every value is a combination of the noisy inputs
z = x + η, so the model has one draw per input and rows on z: the rows are the realized
products of the single-edge averaging matrices W_t = I − (e_v − e_w)(e_v − e_w)ᵀ/2 (one-sided
for half-applied exchanges). They are dyadic rationals, computed exactly for small runs.
The paper column is Muffliato Thm 1 with those realized W_t (Cor. 1 / Thm 4 setting).
"""

from __future__ import annotations

from typing import Unpack

import numpy as np
from flint import fmpq, fmpq_mat

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.paper import message_share_sum
from coordinator_tools.audit.protocols.muffliato_async.records import VALUE_KINDS
from coordinator_tools.audit.protocols.muffliato_async.schedule import ExchangeSchedule, ValueRef, walk
from coordinator_tools.audit.records import MessageKey

PAPER_NOTE = "paper: Muffliato Thm 1 with the realized single-edge averaging matrices (Cor. 1 / Thm 4)"


def received_values(schedule: ExchangeSchedule) -> list[ValueRef]:
    """Every value some node received, in schedule order: the model's rows, in order."""
    return sorted({ref for view in schedule.received for ref in view}, key=lambda ref: (ref[1], ref[0]))


def canary_model(schedule: ExchangeSchedule) -> CanaryModel:
    """The run's canary coordinates, as of z = x + η; a value is named (sender, exchange id)."""
    model = linear_model(schedule)
    labels = tuple((sender, schedule.exchanges[index].exchange_id) for sender, index in received_values(schedule))
    return CanaryModel(model, model.inputs, labels, exchange_value)


def exchange_value(key: MessageKey) -> tuple[int, str] | None:
    """(sender, exchange id) of a logged exchange value; None for any other message."""
    return (key.peer, key.id.exchange_id) if key.kind in VALUE_KINDS and key.peer is not None else None


def linear_model(schedule: ExchangeSchedule) -> LinearGaussianModel:
    """One row per value some node received, in schedule order; z = x + η columns."""
    messages = received_values(schedule)
    position = {ref: i for i, ref in enumerate(messages)}
    received = tuple(tuple(sorted({position[ref] for ref in view})) for view in schedule.received)

    def exact_rows() -> fmpq_mat:
        identity = np.array([[fmpq(int(i == j)) for j in range(schedule.n)] for i in range(schedule.n)], dtype=object)
        rows = message_rows(schedule, messages, identity)
        return fmpq_mat(len(messages), schedule.n, [x for row in rows for x in row])

    rows = message_rows(schedule, messages, np.eye(schedule.n))
    return LinearGaussianModel(n=schedule.n, inputs=rows, received=received, exact_rows=exact_rows)


def message_rows(schedule: ExchangeSchedule, messages: list[ValueRef], initial: np.ndarray) -> np.ndarray:
    """The sender's row just before its exchange, for every message, starting from `initial` rows."""
    wanted: dict[int, list[tuple[int, int]]] = {}
    for i, (sender, index) in enumerate(messages):
        wanted.setdefault(index, []).append((i, sender))
    rows = np.empty((len(messages), initial.shape[1]), dtype=initial.dtype)
    for index, before_initiator, before_responder in walk(schedule, initial.copy()):
        for i, sender in wanted.get(index, ()):
            rows[i] = before_initiator if sender == schedule.exchanges[index].initiator else before_responder
    return rows


def account(schedule: ExchangeSchedule, **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses of the run in `schedule` at the noise, sensitivity, order and δ of `options`."""
    model = linear_model(schedule)
    share_sum = message_share_sum(model, options.get("threat_model", ThreatModel()))
    return account_model(model, share_sum, notes=[PAPER_NOTE], **options)
