"""Krylov bases of Muffliato views: the same row space as the messages, offered only when W is fixed."""

from __future__ import annotations

import numpy as np

from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.accountant import (
    linear_model,
    transcript_geometry,
)
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.views import observer_views
from coordinator_tools.topology import generators
from tests.accounting.reference import drop, topology_from_graph


def erdos_renyi_transcript(rounds: int, accelerated: bool = True):
    return planned_transcript(topology_from_graph(generators.erdos_renyi(30, seed=3), rounds=rounds,
                                                  accelerated=accelerated))


def test_the_basis_spans_the_messages_rows():
    """Few rounds keep the raw rows well conditioned: both projectors agree, and the basis has a column per
    independent row (fewer than rows on a few views, where the space saturates; those are not "complete")."""
    model = linear_model(erdos_renyi_transcript(rounds=3))
    for view in observer_views(model, ThreatModel()):
        span = model.span_basis(view.messages)
        rows = model.inputs[list(view.messages)]
        assert span.basis.shape[1] == np.linalg.matrix_rank(rows)
        assert span.complete == (span.basis.shape[1] == len(view.messages))
        assert np.allclose(span.basis.T @ span.basis, np.eye(span.basis.shape[1]), atol=1e-12)
        assert np.allclose(span.basis @ span.basis.T, np.linalg.pinv(rows) @ rows, atol=1e-9)
        assert span.error < 1e-10


def test_a_saturated_space_drops_exact_zeros_only():
    """The 32-node hypercube's W has 6 distinct eigenvalues: from round 6 on, no view gains a direction."""
    model = linear_model(planned_transcript(topology_from_graph(generators.hypercube(32), rounds=9,
                                                                accelerated=True)))
    early = linear_model(planned_transcript(topology_from_graph(generators.hypercube(32), rounds=6,
                                                                accelerated=True)))
    for view, short in zip(observer_views(model, ThreatModel()), observer_views(early, ThreatModel())):
        span, first = model.span_basis(view.messages), early.span_basis(short.messages)
        assert not span.complete and span.basis.shape[1] == first.basis.shape[1]
        assert np.allclose(span.basis @ span.basis.T, first.basis @ first.basis.T, atol=1e-10)


def test_a_drop_out_leaves_the_views_to_their_raw_rows_and_stays_conservative():
    planned = erdos_renyi_transcript(rounds=8)
    edge = planned.topology.edges[0]
    transcript = drop(planned, edge.u, edge.v, 2)
    model = linear_model(transcript)
    assert all(model.span_basis(view.messages) is None for view in observer_views(model, ThreatModel()))
    exact = transcript_geometry(transcript, method="rational")
    interval = transcript_geometry(transcript, method="float")
    off = ~np.eye(30, dtype=bool)
    assert (interval.lower[off] <= exact.lower[off]).all() and (exact.lower[off] <= interval.upper[off]).all()
