"""Hypothesis building blocks shared by the fuzz tests: bit flips, and a view log's frames rearranged.

A view log is the magic followed by frames (length, checksum, body); the log-reader and the
replay fuzz tests damage logs the same ways, so the ways live here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from node.viewlog import FRAME, MAGIC


def flip_bits(data: bytes, bits: Iterable[int]) -> bytes:
    """`data` with each listed bit (0 = lowest bit of the first byte) inverted."""
    flipped = bytearray(data)
    for bit in bits:
        flipped[bit // 8] ^= 1 << (bit % 8)
    return bytes(flipped)


def bit_sets(size: int, *, max_flips: int = 3) -> st.SearchStrategy[frozenset[int]]:
    """One to `max_flips` distinct bit positions in `size` bytes."""
    return st.frozensets(st.integers(0, 8 * size - 1), min_size=1, max_size=max_flips)


def log_frames(data: bytes) -> list[bytes]:
    """The framed records of an intact log, in file order."""
    if not data.startswith(MAGIC):
        raise ValueError("not a view log")
    frames, offset = [], len(MAGIC)
    while offset < len(data):
        length, _ = FRAME.unpack_from(data, offset)
        frames.append(data[offset : offset + FRAME.size + length])
        offset += FRAME.size + length
    return frames


def log_bytes(frames: Sequence[bytes]) -> bytes:
    return MAGIC + b"".join(frames)


def frame_starts(frames: Sequence[bytes]) -> list[int]:
    """File offset of each frame, then the end of the file."""
    starts = [len(MAGIC)]
    for frame in frames:
        starts.append(starts[-1] + len(frame))
    return starts


@dataclass(frozen=True)
class Rearrangement:
    """A new frame order: frame `order[i]` of the original log becomes frame i."""

    kind: str
    order: tuple[int, ...]

    def apply(self, frames: Sequence[bytes]) -> list[bytes]:
        return [frames[index] for index in self.order]


@st.composite
def rearrangements(draw: st.DrawFn, count: int) -> Rearrangement:
    """Reorder the records after the header, duplicate one, drop one, or swap the header with another.

    `count` is the number of frames, header included; it must be at least 2.
    """
    kind = draw(st.sampled_from(["reorder", "duplicate", "drop", "swap_header"]))
    order = list(range(count))
    if kind == "reorder":
        order[1:] = draw(st.permutations(order[1:]))
    elif kind == "duplicate":
        order.insert(draw(st.integers(1, count)), draw(st.integers(0, count - 1)))
    elif kind == "drop":
        del order[draw(st.integers(0, count - 1))]
    else:
        other = draw(st.integers(1, count - 1))
        order[0], order[other] = other, 0
    return Rearrangement(kind, tuple(order))
