"""Account a synchronous Muffliato run: its linear-Gaussian model and every column per pair.

The model's rows are the real coefficients of every value some observer received (the
nodes' own recursion, Chebyshev acceleration included); the paper column uses the plain
products Theorem 1 is stated with. One entry point, `account`, for planned and realized
runs alike (both are Transcripts).
"""

from __future__ import annotations

from typing import Unpack

import numpy as np
from flint import fmpq_mat

from coordinator_tools.audit.accountants import AccountingOptions, account_model
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel
from coordinator_tools.audit.exact import Method, ViewGeometry, view_geometry
from coordinator_tools.audit.losses import PairwiseLosses, ThreatModel
from coordinator_tools.audit.protocols.muffliato.coefficients import (
    float_rounds,
    modular_rounds,
    rational_history,
)
from coordinator_tools.audit.protocols.muffliato.krylov import krylov_bases
from coordinator_tools.audit.protocols.muffliato.paper import message_sum
from coordinator_tools.audit.protocols.muffliato.transcript import Message, Transcript
from coordinator_tools.audit.records import MessageKey
from node.message import GOSSIP


def received_messages(transcript: Transcript) -> list[Message]:
    """Every value some node received, sorted by round then sender: the model's rows, in order."""
    return sorted({m for view in transcript.received for m in view}, key=lambda m: (m[1], m[0]))


def canary_model(transcript: Transcript) -> CanaryModel:
    """The run's canary coordinates: each value carries its rows' share of every node's canaries, as of z = x + η.

    A value is named (sender, round), as the transcript names messages."""
    model = linear_model(transcript)
    return CanaryModel(model, model.inputs, tuple(received_messages(transcript)), round_value)


def round_value(key: MessageKey) -> Message | None:
    """(sender, round) of a logged round value; None for any other message."""
    return (key.peer, key.id.round) if key.kind == GOSSIP and key.peer is not None else None


def linear_model(transcript: Transcript) -> LinearGaussianModel:
    """One row per value some node received, sorted by round then sender; z = x + η columns.

    Float rows are picked round by round from the streamed coefficients; rational and
    modular rows, and Krylov bases of views, are computed only if the exact method asks.
    """
    messages = received_messages(transcript)
    index = {message: i for i, message in enumerate(messages)}
    by_round: dict[int, list[tuple[int, int]]] = {}
    for i, (w, t) in enumerate(messages):
        by_round.setdefault(t, []).append((i, w))
    rows = np.zeros((len(messages), transcript.n))
    for t, coefficients in enumerate(float_rounds(transcript, accelerated=transcript.accelerated)):
        for i, w in by_round.get(t, ()):
            rows[i] = coefficients[w]
    received = tuple(tuple(sorted(index[m] for m in set(view))) for view in transcript.received)

    def exact_rows() -> fmpq_mat:
        return _rational_rows(transcript, messages)

    def sketch(prime: int, columns: np.ndarray) -> np.ndarray:
        sketched = np.zeros((len(messages), columns.shape[1]), dtype=np.int64)
        rounds = modular_rounds(transcript, accelerated=transcript.accelerated, prime=prime, sketch=columns)
        for t, coefficients in enumerate(rounds):
            for i, w in by_round.get(t, ()):
                sketched[i] = coefficients[w]
        return sketched

    return LinearGaussianModel(n=transcript.n, inputs=rows, received=received, exact_rows=exact_rows,
                               sketch=sketch, span_basis=krylov_bases(transcript, messages))


def transcript_geometry(
    transcript: Transcript, threat_model: ThreatModel = ThreatModel(), *, method: Method = "auto"
) -> ViewGeometry:
    """The σ-free geometry of every observer's view of the run in `transcript`."""
    return view_geometry(linear_model(transcript), threat_model, method=method)


def account(transcript: Transcript, geometry: ViewGeometry | None = None,
            **options: Unpack[AccountingOptions]) -> PairwiseLosses:
    """All pairwise losses of the run in `transcript` at the noise, sensitivity, order and δ of `options`.

    `geometry`, when the caller already has it (calibration), is not computed again.
    """
    threat_model = options.get("threat_model", ThreatModel())
    return account_model(linear_model(transcript), message_sum(transcript, threat_model), geometry=geometry,
                         **options)


def _rational_rows(transcript: Transcript, messages: list[Message]) -> fmpq_mat:
    """The model's rows in exact rational arithmetic."""
    history = rational_history(transcript, accelerated=transcript.accelerated)
    n = transcript.n
    return fmpq_mat(len(messages), n, [history[t][w, k] for w, t in messages for k in range(n)])
