"""The canary audit of personalized CD: its broadcasts unrolled by hand, each agent's m_i from its canary record,
and the noise check's tail bounds for Laplace noise.

The hand run is a triangle (Metropolis weights: every neighbour's W_ij / D_ii is 1/2) of three agents of
sizes 10, 40 and 150 (confidences 0.1, 0.4 and 1), whose records say:
agent 0's update 0 used nothing (broadcast #1), agent 1's update 0 used 0's #1, agent 0's update 1 used
1's #1 (broadcast #2), agent 2's update 0 used 0's #2 and 1's #1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from coordinator_tools.audit.empirical import laplace_tails
from coordinator_tools.audit.protocols.personalized_cd.canary_model import agent_sizes, canary_model
from coordinator_tools.audit.protocols.personalized_cd.run import BroadcastRun
from coordinator_tools.audit.records import MessageKey
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.message import MessageId
from node.protocols.personalized_cd import MODEL, PersonalizedCDParams

MU, L0 = 2.0, 0.3
SIZES = {0: 10, 1: 40, 2: 150}
SPENDS = {0: [0.5, 0.7], 1: [0.9], 2: [1.1]}  # distinct: a noise column is known by its owner and std
PARAMS = PersonalizedCDParams(dimension=2, canaries=4, mu=MU, lipschitz=L0, max_examples=100, updates=2,
                              epsilon=4.0, delta=1e-5)


def hand_run(params: PersonalizedCDParams = PARAMS, **changes: object) -> BroadcastRun:
    topology = build_topology(generate("ring", n=3), graph_name="ring", run_id="hand", protocol=params)
    records = dict(
        spends=SPENDS,
        views={0: frozenset({(1, 1), (2, 1)}), 1: frozenset({(0, 1), (0, 2), (2, 1)}),
               2: frozenset({(0, 1), (0, 2), (1, 1)})},
        sent={0: frozenset({1, 2}), 1: frozenset({1}), 2: frozenset({1})},
        used={0: {0: {}, 1: {1: 1}}, 1: {0: {0: 1}}, 2: {0: {0: 2, 1: 1}}},
    )
    return BroadcastRun(topology, **{**records, **changes})


def constants(agent: int) -> tuple[float, float]:
    """(α_i, α_i μ c_i) from the paper's formulas: c_i = min(1, m_i/100), L_i^loc = 1/4 + 2/m_i."""
    m = SIZES[agent]
    confidence = min(1.0, m / 100)
    step = 1.0 / (1.0 + MU * confidence * (0.25 + 2.0 / m))
    return step, step * MU * confidence


def hand_rows() -> dict[tuple[int, int], tuple[np.ndarray, dict[tuple[int, int], float]]]:
    """Every broadcast as (coefficients of the canaries c_0..c_2, {(agent, release): coefficient of its draw})."""
    (a0, k0), (a1, k1), (a2, k2) = constants(0), constants(1), constants(2)
    half = 0.5
    b01 = (np.array([-k0, 0, 0]), {(0, 0): -k0})
    b11 = (a1 * half * b01[0] + np.array([0, -k1, 0]), {(0, 0): -a1 * half * k0, (1, 0): -k1})
    b02 = ((1 - a0) * b01[0] + a0 * half * b11[0] + np.array([-k0, 0, 0]),
           {(0, 0): -(1 - a0) * k0 - a0 * half * a1 * half * k0, (1, 0): -a0 * half * k1, (0, 1): -k0})
    b21 = (a2 * half * (b02[0] + b11[0]) + np.array([0, 0, -k2]),
           {(0, 0): a2 * half * (b02[1][0, 0] + b11[1][0, 0]), (0, 1): a2 * half * -k0,
            (1, 0): a2 * half * (b02[1][1, 0] + b11[1][1, 0]), (2, 0): -k2})
    return {(0, 1): b01, (1, 1): b11, (0, 2): b02, (2, 1): b21}


def laplace_std(agent: int, release: int) -> float:
    return math.sqrt(2.0) * (2.0 * L0 / SIZES[agent]) / SPENDS[agent][release]


def test_every_broadcast_is_update_6_unrolled_on_the_canaries_and_the_laplace_draws() -> None:
    model = canary_model(hand_run(), SIZES)
    assert model.noise == "laplace" and model.scale == 1.0
    expected = hand_rows()
    assert sorted(model.labels) == sorted(expected)  # one row per broadcast, however many agents saw it
    owners, scales = model.model.owners, model.model.scales
    draws_of = [(agent, release) for agent, spent in SPENDS.items() for release in range(len(spent))]
    column = {draw: next(k for k in range(len(owners)) if owners[k] == draw[0]
                         and math.isclose(scales[k], laplace_std(*draw), rel_tol=1e-12)) for draw in draws_of}
    assert sorted(column.values()) == list(range(len(owners)))  # one column per draw, each of its Laplace std
    for j, label in enumerate(model.labels):
        canaries, draws = expected[label]
        assert model.planted[j] == pytest.approx(canaries, rel=1e-12)
        assert np.array_equal(model.model.inputs[j], model.planted[j])
        noise = np.zeros(len(owners))
        for draw, coefficient in draws.items():
            noise[column[draw]] = coefficient
        assert model.model.noise_rows[j] == pytest.approx(noise, rel=1e-12, abs=1e-15)
    views = {0: {(1, 1), (2, 1)}, 1: {(0, 1), (0, 2), (2, 1)}, 2: {(0, 1), (0, 2), (1, 1)}}
    assert [{model.labels[j] for j in model.model.received[v]} for v in range(3)] == [views[v] for v in range(3)]
    assert model.label_of(MessageKey(1, MODEL, MessageId(sequence=2))) == (1, 2)
    assert model.label_of(MessageKey(1, "raw", MessageId())) is None


def test_a_broadcast_whose_update_or_size_is_unknown_is_left_out_and_so_is_what_used_it() -> None:
    no_update = canary_model(hand_run(used={0: {0: {}, 1: {1: 1}}, 1: {}, 2: {0: {0: 2, 1: 1}}}), SIZES)
    assert set(no_update.labels) == {(0, 1)}  # 1's #1 unknown: 0's #2 and 2's #1 used it
    no_size = canary_model(hand_run(), {0: 10, 1: 40})
    assert set(no_size.labels) == {(0, 1), (1, 1), (0, 2)}
    unheard = canary_model(hand_run(views={0: frozenset({(2, 1)}), 1: frozenset({(0, 1), (0, 2)}),
                                           2: frozenset({(0, 1), (0, 2), (1, 1)})}), SIZES)
    assert set(unheard.labels) == {(0, 1), (1, 1)}  # agent 0 claims 1's #1, which its view never logged


def test_the_canary_magnitude_gives_m_i_and_a_magnitude_of_no_whole_size_gives_none() -> None:
    assert agent_sizes(PARAMS, {0: L0 / 10, 1: L0 / 40, 2: L0 / 40.5, 3: 0.0}) == {0: 10, 1: 40}


def test_non_private_cd_has_no_noise_columns() -> None:
    params = PARAMS.model_copy(update={"epsilon": None, "delta": 0.0})
    model = canary_model(hand_run(params, spends={agent: [math.inf] * len(spent) for agent, spent in SPENDS.items()}),
                         SIZES)
    assert model.model.noise_rows.shape == (4, 0) and model.noise == "gaussian"
    assert model.planted[model.labels.index((2, 1))] == pytest.approx(hand_rows()[2, 1][0], rel=1e-12)


def test_the_fourth_moment_of_a_sum_of_laplace_draws_is_3v2_plus_3_sum_s4() -> None:
    rng = np.random.default_rng(4)
    spreads = np.array([1.0, 0.5, 2.0])
    sums = rng.laplace(0.0, spreads / math.sqrt(2.0), size=(2_000_000, 3)).sum(axis=1)
    variance = float(np.sum(spreads**2))
    assert np.mean(sums**2) == pytest.approx(variance, rel=0.01)
    assert np.mean(sums**4) == pytest.approx(3 * variance**2 + 3 * np.sum(spreads**4), rel=0.03)


def test_the_laplace_tail_bounds_hold_for_the_published_noise_and_catch_a_tenth_of_it() -> None:
    rng = np.random.default_rng(5)
    count, messages = 200, 5_000
    spreads = np.tile([[1.0, 0.3]], (messages, 1))
    draws = rng.laplace(0.0, spreads[:, None, :] / math.sqrt(2.0), size=(messages, count, 2)).sum(axis=2)
    honest = laplace_tails(np.mean(draws**2, axis=1), spreads, count)
    for level in (0.5, 0.1, 0.01, 0.001):
        assert np.mean(honest <= level) <= level  # a bound on the p-value: never more false alarms than its level
    quiet = laplace_tails(np.mean((0.1 * draws[:100]) ** 2, axis=1), spreads[:100], count)
    loud = laplace_tails(np.mean((10.0 * draws[:100]) ** 2, axis=1), spreads[:100], count)
    assert np.all(quiet < 1e-3) and np.all(loud < 1e-3)
