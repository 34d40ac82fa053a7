"""A refusal's record is bounded: at most the protocol's dimension of its payload, the digest of all of it,
and a cut detail."""

from __future__ import annotations

import hashlib

import numpy as np

from node.codec import from_tensor
from node.journal import MAX_DETAIL_CHARS, refusal_record
from node.message import Message, MessageId

DIMENSION = 3


def test_a_refused_payload_keeps_at_most_the_dimension_and_the_digest_of_all_of_it() -> None:
    hostile = Message("model", MessageId(sequence=2), np.arange(1000.0))
    record = refusal_record(4, "INVALID_ARGUMENT", "x" * 10_000, "model", hostile.id, hostile, DIMENSION).rejected
    assert from_tensor(record.payload).tolist() == [0.0, 1.0, 2.0]
    assert record.payload_sha256 == hashlib.sha256(np.arange(1000.0).astype("<f8").tobytes()).digest()
    assert len(record.detail) == MAX_DETAIL_CHARS and (record.claimed_sender, record.sequence) == (4, 2)


def test_a_payload_of_the_dimension_is_kept_whole() -> None:
    valid = Message("model", MessageId(sequence=1), np.array([0.5, -1.0, 2.0]))
    record = refusal_record(4, "ALREADY_EXISTS", "again", "model", valid.id, valid, DIMENSION).rejected
    assert from_tensor(record.payload).tolist() == [0.5, -1.0, 2.0]
    assert record.payload_sha256 == hashlib.sha256(np.array([0.5, -1.0, 2.0], dtype="<f8").tobytes()).digest()
