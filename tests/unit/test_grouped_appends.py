"""Group commit of a node's log: concurrent records share a write and an fsync, none returns early.

A round's values from several neighbours arrive together; each receiver logs its value and
acknowledges only once the record is on disk. Grouping must keep that promise, keep the
order records were handed in, and tell every caller of a failed write.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from netdp.v1 import viewlog_pb2
from node.journal import GroupedAppends
from node.viewlog import VIEW_LOG_NAME, ViewLogWriter, read_log


class CountingWriter(ViewLogWriter):
    """A real log writer that remembers the size of every write it made."""

    def __init__(self, path: Path) -> None:
        self.writes: list[int] = []
        super().__init__(path, viewlog_pb2.RunHeader(run_id="grouped", node_id=0))
        self.writes.clear()  # the header is not one of the appends under test

    def append_many(self, records) -> None:
        self.writes.append(len(records))
        super().append_many(records)


def drop_out(round_index: int) -> viewlog_pb2.Record:
    return viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=1, round=round_index, reason="test"))


async def test_concurrent_appends_share_writes_keep_their_order_and_return_once_on_disk(tmp_path):
    writer = CountingWriter(tmp_path / VIEW_LOG_NAME)
    appends = GroupedAppends(writer)
    on_disk_when_returned: list[bool] = []

    async def log(round_index: int) -> None:
        await appends.append([drop_out(round_index)])
        rounds = [d.round for d in read_log(tmp_path / VIEW_LOG_NAME).of_kind("drop_out")]
        on_disk_when_returned.append(round_index in rounds)

    await asyncio.gather(*(log(r) for r in range(20)))
    writer.close()

    assert [d.round for d in read_log(tmp_path / VIEW_LOG_NAME).of_kind("drop_out")] == list(range(20))
    assert on_disk_when_returned == [True] * 20
    assert writer.writes == [20]  # handed in before the first write started: all in that write


async def test_every_caller_of_a_failed_write_hears_of_it_and_later_appends_still_try(tmp_path):
    writer = CountingWriter(tmp_path / VIEW_LOG_NAME)
    appends = GroupedAppends(writer)
    writer.close()
    outcomes = await asyncio.gather(*(appends.append([drop_out(r)]) for r in range(3)), return_exceptions=True)
    assert all(isinstance(outcome, ValueError) and "closed" in str(outcome) for outcome in outcomes)
    with pytest.raises(ValueError, match="closed"):
        await appends.append([drop_out(4)])
