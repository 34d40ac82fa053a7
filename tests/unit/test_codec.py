"""Payload codec: bit-exact round trips, refused payloads, and chunking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from node.codec import PayloadError, from_tensor, pack, split_chunks, to_tensor, unpack

finite_arrays = hnp.arrays(
    dtype=np.float64,
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
    elements=st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True),
)


@given(finite_arrays)
def test_pack_then_unpack_is_bit_exact_with_its_shape(value: np.ndarray) -> None:
    data, shape = pack(value)
    assert shape == value.shape
    restored = unpack(data, shape)
    assert restored.shape == value.shape
    assert restored.dtype == np.float64
    assert restored.tobytes() == value.tobytes()  # keeps -0.0 and subnormals exactly


def test_the_wire_format_is_little_endian_float64_whatever_the_input_dtype() -> None:
    big_endian = np.array([1.5, -0.0, 2.0**-1074], dtype=">f8")
    data, _ = pack(big_endian)
    assert data == np.array([1.5, -0.0, 2.0**-1074], dtype="<f8").tobytes()
    data, shape = pack(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert shape == (2, 3)
    assert unpack(data, shape).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_unpacked_arrays_are_writable_copies() -> None:
    data, shape = pack(np.ones(3))
    restored = unpack(data, shape)
    restored[0] = 5.0
    assert unpack(data, shape)[0] == 1.0


@pytest.mark.parametrize(
    ("size", "shape"),
    [(3, (4,)), (5, (4,)), (4, (2, 3)), (0, (1,)), (1, (0,))],
)
def test_a_length_that_does_not_match_the_shape_is_refused(size: int, shape: tuple[int, ...]) -> None:
    with pytest.raises(PayloadError, match="payload has"):
        unpack(np.zeros(size).tobytes(), shape)


def test_a_length_that_is_not_a_whole_number_of_floats_is_refused() -> None:
    with pytest.raises(PayloadError, match="payload has 15 bytes"):
        unpack(b"\x00" * 15, (2,))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_on_receipt_but_kept_in_logs(bad: float) -> None:
    value = np.array([1.0, bad, 3.0])
    data, shape = pack(value)
    with pytest.raises(PayloadError, match="NaN or infinite"):
        unpack(data, shape)
    assert from_tensor(to_tensor(value)).tobytes() == value.tobytes()


@given(finite_arrays)
def test_tensor_round_trip(value: np.ndarray) -> None:
    tensor = to_tensor(value)
    assert tuple(tensor.shape) == value.shape
    assert from_tensor(tensor).tobytes() == value.tobytes()


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 1025, 3 * 1024, 3 * 1024 + 7])
def test_chunks_are_bounded_and_reassemble(size: int) -> None:
    chunk_bytes = 1024
    data = bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8))
    chunks = list(split_chunks(data, chunk_bytes))
    assert b"".join(chunks) == data
    assert all(len(chunk) <= chunk_bytes for chunk in chunks)
    assert len(chunks) == max(1, -(-size // chunk_bytes))


def test_a_packed_vector_survives_chunking() -> None:
    value = np.random.default_rng(1).normal(size=(300, 7))
    data, shape = pack(value)
    restored = unpack(b"".join(split_chunks(data, 1000)), shape)
    assert restored.tobytes() == value.tobytes()
