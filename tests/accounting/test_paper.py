"""Muffliato Thm 1 on the realized schedule: hand values, dense reference, Eq. 7, σ = 0, collusion."""

from __future__ import annotations

import warnings
from fractions import Fraction

import networkx as nx
import numpy as np

from coordinator_tools.audit.losses import ThreatModel
from coordinator_tools.audit.protocols.muffliato.paper import message_sum, paper_mu
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.topology import generators
from tests.accounting.reference import dense_paper_sum, drop, topology_from_graph


def path_transcript(rounds: int):
    return planned_transcript(topology_from_graph(nx.path_graph(4), rounds=rounds, accelerated=False))


def test_path_sum_for_observer_3_matches_the_hand_computation():
    """Node 3 hears x_2^t, t = 0..3: rows e_2, (0,1,1,1)/3, (1,2,3,3)/9, (4,6,8,9)/27 of W^t."""
    total = message_sum(path_transcript(4))
    assert abs(total[0, 3] - float(Fraction(1, 23) + Fraction(16, 197))) < 1e-15  # 565/4531 ~ 1/8
    assert abs(total[1, 3] - float(Fraction(1, 3) + Fraction(4, 23) + Fraction(36, 197))) < 1e-15
    assert abs(total[2, 3] - float(1 + Fraction(1, 3) + Fraction(9, 23) + Fraction(64, 197))) < 1e-15
    assert np.isnan(np.diag(total)).all()


def test_accelerated_runs_use_plain_products():
    accelerated = planned_transcript(topology_from_graph(nx.path_graph(4), rounds=4, accelerated=True))
    assert np.array_equal(message_sum(accelerated), message_sum(path_transcript(4)), equal_nan=True)


def test_a_drop_out_changes_the_sum_as_recomputed_by_hand():
    """Node 2 misses x_1^1: x_2^2 becomes (0, 2, 3, 4)/9, so 1 -> 3 falls from 1/3 + 4/23 to 1/3 + 4/29."""
    planned = message_sum(path_transcript(3))
    dropped = message_sum(drop(path_transcript(3), 2, 1, 1))
    assert abs(planned[1, 3] - float(Fraction(1, 3) + Fraction(4, 23))) < 1e-15
    assert abs(dropped[1, 3] - float(Fraction(1, 3) + Fraction(4, 29))) < 1e-15
    assert planned[0, 3] > 0 and dropped[0, 3] == 0  # x_0 no longer reaches node 3 in time


def test_sparse_sum_equals_the_dense_reference_on_a_realized_run():
    planned = planned_transcript(topology_from_graph(generators.erdos_renyi(40, seed=2), rounds=9, accelerated=True))
    neighbours = planned.topology.neighbours
    transcript = drop(drop(planned, 7, neighbours[7][0], 3), 11, neighbours[11][-1], 0)
    dense = dense_paper_sum(transcript)
    sparse = message_sum(transcript)
    off = ~np.eye(transcript.n, dtype=bool)
    assert np.allclose(sparse[off], dense[off], rtol=1e-12, atol=0)
    # Eq. 7: every message splits one unit of "share" over all sources, v's own included.
    messages = np.array([len(set(r)) for r in transcript.received])
    assert np.allclose(np.nansum(sparse, axis=0) + np.diag(dense), messages, rtol=1e-12)


def test_no_noise_means_infinite_loss_where_the_view_depends_on_the_input():
    transcript = path_transcript(1)  # one round: node 3 hears x_2^0 only
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mu = paper_mu(transcript, sigma=0.0, sensitivity=1.0)
    assert mu[2, 3] == np.inf and mu[0, 3] == 0.0 and mu[1, 3] == 0.0


def test_colluders_add_up_their_messages():
    transcript = path_transcript(3)
    alone = message_sum(transcript)
    together = message_sum(transcript, ThreatModel(collusion=(0, 3)))
    assert np.array_equal(together[:, 0], together[:, 3], equal_nan=True)
    assert np.allclose(together[[1, 2], 3], alone[[1, 2], 0] + alone[[1, 2], 3], rtol=1e-14)
    assert np.isnan(together[[0, 3], 3]).all()
