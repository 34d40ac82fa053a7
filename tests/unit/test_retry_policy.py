"""The one retry policy of every delivery rule: its pauses, its jitter and its give-up rule.

A link that always fails with a chosen status, timed by a fake clock, shows how many tries a
message gets and how long it waits between them, without sleeping.
"""

from __future__ import annotations

import itertools
import random

import pytest

from netdp.v1 import peer_pb2
from node import delivery
from node.delivery import BEHIND_RETRY, TRANSPORT_RETRY, CustodyDelivery, RetryPolicy, send_with_retries
from node.journal import Delivery
from node.transport.base import LinkError


class FakeClock:
    """time.monotonic and asyncio.sleep of the delivery module: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


class FailingLink:
    """Fails every attempt with `code`; records when each came."""

    def __init__(self, clock: FakeClock, code: str) -> None:
        self._clock, self._code = clock, code
        self.tries: list[float] = []

    async def send(self, envelope: peer_pb2.Envelope, data: bytes, timeout_s: float, *, wait_for_peer: bool) -> None:
        self.tries.append(self._clock.now)
        raise LinkError(self._code, "scripted")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(delivery.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(delivery.asyncio, "sleep", fake.sleep)
    return fake


def first(policy: RetryPolicy, count: int) -> list[float]:
    return list(itertools.islice(policy.delays(), count))


@pytest.mark.parametrize("jitter", ["none", "full", "decorrelated"])
def test_pauses_stay_within_the_policys_bounds(jitter: str) -> None:
    policy = RetryPolicy(base_delay_s=0.05, multiplier=2.0, max_delay_s=0.4, jitter=jitter, rng=random.Random(1))
    pauses = first(policy, 200)
    low = policy.base_delay_s if jitter != "full" else 0.0
    assert all(low <= pause <= policy.max_delay_s for pause in pauses)
    ceilings = [min(0.4, 0.05 * 2**k) for k in range(200)]
    if jitter != "decorrelated":  # full jitter stays below the exponential ceiling of its try
        assert all(pause <= ceiling for pause, ceiling in zip(pauses, ceilings))
    if jitter == "none":
        assert pauses == ceilings


@pytest.mark.parametrize("jitter", ["full", "decorrelated"])
def test_jitter_varies_the_pauses_and_a_seed_repeats_them(jitter: str) -> None:
    pauses = first(RetryPolicy(jitter=jitter, rng=random.Random(7)), 50)
    assert len(set(pauses[10:])) == 40  # past the ramp, no two pauses alike
    assert pauses == first(RetryPolicy(jitter=jitter, rng=random.Random(7)), 50)
    assert pauses != first(RetryPolicy(jitter=jitter, rng=random.Random(8)), 50)


def test_the_default_policies_jitter_from_their_own_generator_not_a_noise_sampler() -> None:
    assert isinstance(TRANSPORT_RETRY.rng, random.Random) and isinstance(BEHIND_RETRY.rng, random.Random)
    assert TRANSPORT_RETRY.jitter == "full" and BEHIND_RETRY.jitter == "decorrelated"


@pytest.mark.parametrize("fields", [{"base_delay_s": 0.0}, {"base_delay_s": 2.0, "max_delay_s": 1.0},
                                    {"multiplier": 0.5}, {"max_attempts": 0}])
def test_a_policy_that_cannot_pace_anything_is_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**fields)


async def test_a_message_is_given_up_after_max_attempts_with_a_pause_between_tries(clock: FakeClock) -> None:
    link = FailingLink(clock, "UNAVAILABLE")
    policy = RetryPolicy(max_attempts=4, rng=random.Random(0))
    result = await send_with_retries(link, peer_pb2.Envelope(), b"", 30.0, wait_for_peer=False, policy=policy,
                                     held=lambda attempt: True)
    assert not result.delivered and result.attempts == 4 and result.unreachable
    assert clock.pauses == first(RetryPolicy(max_attempts=4, rng=random.Random(0)), 3)  # none after the last


async def test_a_message_is_given_up_at_the_policys_deadline(clock: FakeClock) -> None:
    link = FailingLink(clock, "DEADLINE_EXCEEDED")
    policy = RetryPolicy(jitter="none", max_delay_s=0.05, deadline_s=1.0)  # a try every 50 ms, no attempt limit
    result = await send_with_retries(link, peer_pb2.Envelope(), b"", 30.0, wait_for_peer=False, policy=policy,
                                     held=lambda attempt: True)
    assert not result.delivered and result.attempts == len(link.tries) == 20
    assert clock.now == pytest.approx(1.0) and all(when < 1.0 for when in link.tries)


@pytest.mark.parametrize("code", ["FAILED_PRECONDITION", "INVALID_ARGUMENT", "PERMISSION_DENIED"])
async def test_a_non_retryable_error_ends_the_delivery_at_once(clock: FakeClock, code: str) -> None:
    link = FailingLink(clock, code)
    result = await CustodyDelivery(5).deliver(link, peer_pb2.Envelope(), b"", 30.0, wait_for_peer=False)
    assert result == Delivery(False, 1, f"{code}: scripted", unreachable=False,
                              peer_moved_on=code == "FAILED_PRECONDITION")
    assert link.tries == [0.0] and clock.pauses == []


async def test_which_errors_are_retryable_is_the_policys_choice(clock: FakeClock) -> None:
    link = FailingLink(clock, "RESOURCE_EXHAUSTED")
    policy = RetryPolicy(max_attempts=3, retryable=frozenset({"RESOURCE_EXHAUSTED"}))
    result = await CustodyDelivery(3, retry=policy).deliver(link, peer_pb2.Envelope(), b"", 30.0, wait_for_peer=False)
    assert not result.delivered and len(link.tries) == 3
