"""Vectors on the wire and in logs: packed little-endian float64 bytes plus a shape."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence

import numpy as np

from netdp.v1 import viewlog_pb2

WIRE_DTYPE = np.dtype("<f8")


class PayloadError(ValueError):
    """A packed payload does not match its shape, or holds non-finite values."""


def pack(value: np.ndarray) -> tuple[bytes, tuple[int, ...]]:
    """Bytes and shape of `value` as little-endian float64 (no per-element Python work)."""
    array = np.asarray(value, dtype=WIRE_DTYPE, order="C")
    return array.tobytes(), tuple(int(d) for d in array.shape)


def unpack(data: bytes, shape: Sequence[int], *, require_finite: bool = True) -> np.ndarray:
    """Inverse of pack; raises PayloadError on a length/shape mismatch or NaN/Inf.

    Runs once per received message: plain Python arithmetic for the size, and one dot product to
    find a non-finite value (any NaN or infinity makes the sum of squares non-finite), with the
    element-wise check only when that sum is not finite (a finite vector whose squares overflow).
    """
    shape = tuple(map(int, shape))
    expected = math.prod(shape) * WIRE_DTYPE.itemsize
    if len(data) != expected:
        raise PayloadError(f"payload has {len(data)} bytes, shape {shape} needs {expected}")
    array = np.frombuffer(data, dtype=WIRE_DTYPE)
    if require_finite and not math.isfinite(array @ array) and not np.isfinite(array).all():
        raise PayloadError("payload holds NaN or infinite values")
    array = array.astype(np.float64)  # a copy of its own, writable, whatever the byte order of this machine
    return array if len(shape) == 1 else array.reshape(shape)


def digest(data: bytes) -> bytes:
    """SHA-256 of packed payload bytes: tells a retried copy from another value under the same id."""
    return hashlib.sha256(data).digest()


def to_tensor(value: np.ndarray) -> viewlog_pb2.Tensor:
    data, shape = pack(value)
    return viewlog_pb2.Tensor(shape=shape, data=data)


def from_tensor(tensor: viewlog_pb2.Tensor) -> np.ndarray:
    """Decode a logged tensor; logged values are exactly what was sent, so no finiteness check."""
    return unpack(tensor.data, tensor.shape, require_finite=False)


def split_chunks(data: bytes, chunk_bytes: int) -> Iterator[bytes]:
    """Slices of at most chunk_bytes; an empty payload still yields one (empty) chunk."""
    view = memoryview(data)
    if not view:
        yield b""
        return
    for start in range(0, len(view), chunk_bytes):
        yield bytes(view[start : start + chunk_bytes])
