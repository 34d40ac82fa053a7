"""The canary audit's arithmetic on hand-made views: what it counts, what it bounds, what its noise check sees."""

from __future__ import annotations

import re

import numpy as np
import pytest

from coordinator_tools.audit.attack import simultaneous_confidence
from coordinator_tools.audit.canary import epsilon_lower, guess_levels
from coordinator_tools.audit.core import LinearGaussianModel
from coordinator_tools.audit.empirical import CanaryModel, canary_audit, planted_canaries
from coordinator_tools.audit.records import MessageKey, NodeLog
from netdp.v1 import viewlog_pb2
from node.codec import to_tensor
from node.message import GOSSIP, MessageId

M, D, DELTA, SIGMA = 400, 2, 1e-5, 1.0


def round_value(key: MessageKey) -> tuple[int, int] | None:
    return (key.peer, key.id.round) if key.kind == GOSSIP else None


def direct_model(n: int) -> CanaryModel:
    """Every node's noisy input z_w = x_w + η_w sent once (round 0) to node (w + 1) mod n, and nothing else."""
    received = tuple(((v - 1) % n,) for v in range(n))
    model = LinearGaussianModel(n=n, inputs=np.eye(n), received=received)
    return CanaryModel(model, model.inputs, tuple((w, 0) for w in range(n)), round_value)


def log_of(node: int, values: dict[tuple[int, int], np.ndarray], outside: list[tuple[int, np.ndarray]] = ()) -> NodeLog:
    """A view log holding round values from (sender, round) and refused values outside the protocol."""
    log = NodeLog(node, viewlog_pb2.RunHeader(), intact=True)
    for (sender, round_index), value in values.items():
        log.received[MessageKey(sender, GOSSIP, MessageId(round=round_index))] = viewlog_pb2.MessageReceived(
            peer=sender, round=round_index, payload=to_tensor(value))
    for sender, value in outside:
        log.unaccounted.append(viewlog_pb2.Rejected(claimed_sender=sender, kind="raw", payload=to_tensor(value)))
    return log


def run(n: int, scales: np.ndarray, rng: np.random.Generator, outside: dict[int, list] | None = None):
    """Signs for every node, and every observer's logged value: data zeros, canary block a·s + scale·σ·ξ."""
    signs = {w: np.where(rng.random(M) < 0.5, -1.0, 1.0) for w in range(n)}
    blocks = {w: 0.5 * signs[w] + scales[w] * SIGMA * rng.standard_normal(M) for w in range(n)}
    logs = {v: log_of(v, {((v - 1) % n, 0): np.concatenate([np.zeros(D), blocks[(v - 1) % n]])},
                      (outside or {}).get(v, [])) for v in range(n)}
    return planted_canaries(signs, dict.fromkeys(range(n), 0.5), M), logs, blocks


def audit(n: int, planted, logs):
    return canary_audit(direct_model(n), logs, planted, dimension=D, sigma=SIGMA, sensitivity=1.0, delta=DELTA,
                        seed=3)


def right_guesses(block: np.ndarray, signs: np.ndarray, k: int) -> int:
    """Computed here from the raw block: one received value, so its score ranks canaries as the value does."""
    order = np.argsort(block)
    return int(np.sum(signs[order[:k]] < 0) + np.sum(signs[order[-k:]] > 0))


def test_a_direct_view_is_bounded_by_the_right_guesses_it_makes():
    n = 3
    planted, logs, blocks = run(n, np.ones(n), np.random.default_rng(0))
    result = audit(n, planted, logs)
    pairs = [(u, v) for u in range(n) for v in range(n) if u != v]
    confidence = simultaneous_confidence(len(pairs))
    for u, v in pairs:
        k = result.guesses[u, v] // 2
        if v == (u + 1) % n:  # v received z_u: a Gaussian view with mu = 1 per canary
            assert result.correct[u, v] == right_guesses(blocks[u], planted.signs[u], k)
            assert result.eps_lower[u, v] == pytest.approx(
                float(epsilon_lower(M, 2 * k, result.correct[u, v], DELTA, confidence)))
        else:  # v never saw u's value: its guesses are coin flips, whatever it does
            assert result.eps_lower[u, v] == 0.0
    assert np.nanmax(result.eps_lower) > 0.0 and all(check.ok for check in result.checks)
    assert result.limit_eps == pytest.approx(float(epsilon_lower(M, M, M, DELTA, confidence)))


def test_the_noise_check_names_the_node_that_drew_too_little():
    n = 4
    scales = np.array([1.0, 1.0, 0.2, 1.0])
    planted, logs, _ = run(n, scales, np.random.default_rng(1))
    (check,) = audit(n, planted, logs).checks
    assert not check.ok
    assert "node 2's round-0 value" not in check.detail and "value (2, 0) received by node 3" in check.detail
    assert re.search(r"node 2 0\.[12]\dx the published", check.detail)  # its fitted std, about 0.2x
    planted, logs, _ = run(n, np.ones(n), np.random.default_rng(1))
    assert audit(n, planted, logs).checks[0].ok


def test_a_node_whose_value_reached_nobody_is_named_untested_not_passed():
    n = 4
    planted, logs, _ = run(n, np.array([1.0, 1.0, 0.2, 1.0]), np.random.default_rng(1))
    logs[3].received.clear()  # node 2's too-little noise never left it: nothing leaked, and nothing to test
    (check,) = audit(n, planted, logs).checks
    assert check.ok and check.detail.endswith("not tested: the noise of node 2, which no checked message carries")
    planted, logs, _ = run(n, np.ones(n), np.random.default_rng(1))
    assert "not tested" not in audit(n, planted, logs).checks[0].detail


def test_a_value_outside_the_model_is_scored_and_listed():
    n = 3
    rng = np.random.default_rng(2)
    signs0 = np.where(rng.random(M) < 0.5, -1.0, 1.0)
    leak = np.concatenate([np.zeros(D), 0.5 * signs0])  # node 0's contribution, before any noise
    planted, logs, _ = run(n, np.full(n, 50.0), rng, outside={2: [(0, leak)]})
    planted = planted_canaries({**planted.signs, 0: signs0}, planted.magnitudes, M)
    result = audit(n, planted, logs)
    assert result.outside and result.outside[0][:2] == (0, 2)
    guesses = result.guesses[0, 2]
    assert result.correct[0, 2] == guesses  # every guess right: the raw value decides
    tests = n * (n - 1) + len(guess_levels(M))  # every pair, and the leak tried at every k: bounds together
    assert result.eps_lower[0, 2] == pytest.approx(float(epsilon_lower(M, guesses, guesses, DELTA,
                                                                       simultaneous_confidence(tests))))
    assert result.eps_lower[0, 1] < 1.0  # node 1 saw z_0 under 50 sigma of noise: next to nothing
