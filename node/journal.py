"""A node's journal: turns protocol events into view-log records and makes them durable.

The public view log gets what the node saw; the private log gets its own input and noise.
Appends are fsync'd in a worker thread so the event loop keeps serving peers meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from netdp.v1 import viewlog_pb2
from node.codec import to_tensor
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, ViewLogWriter


@dataclass(frozen=True)
class Delivery:
    """The fate of one message: delivered or not, after how many attempts, and why not."""

    delivered: bool
    attempts: int
    failure: str = ""
    unreachable: bool = False  # the last attempt found no connection to the peer at all
    peer_moved_on: bool = False  # the peer had closed the round without our value


class Journal:
    """The two logs of one node for one run."""

    def __init__(self, log_dir: Path, header: viewlog_pb2.RunHeader) -> None:
        self.log_dir = Path(log_dir)
        public = viewlog_pb2.RunHeader()
        public.CopyFrom(header)
        public.section = "public"
        public.started_unix = time.time()
        private = viewlog_pb2.RunHeader()
        private.CopyFrom(public)
        private.section = "private"
        self._view = ViewLogWriter(self.log_dir / VIEW_LOG_NAME, public)
        self._private = ViewLogWriter(self.log_dir / PRIVATE_LOG_NAME, private, mode=0o600)

    async def _append(self, writer: ViewLogWriter, *records: viewlog_pb2.Record) -> None:
        await asyncio.to_thread(writer.append_many, records)

    async def sent(self, round_index: int, value: np.ndarray, deliveries: Mapping[int, Delivery]) -> None:
        """One round's value and what became of it at each neighbour, made durable together."""
        payload = to_tensor(value)
        records = [
            viewlog_pb2.Record(sent=viewlog_pb2.MessageSent(
                peer=peer, round=round_index, payload=payload, delivered=delivery.delivered,
                attempts=delivery.attempts, failure=delivery.failure))
            for peer, delivery in sorted(deliveries.items())
        ]
        await self._append(self._view, *records)

    async def received(self, peer: int, round_index: int, value: np.ndarray) -> None:
        record = viewlog_pb2.MessageReceived(peer=peer, round=round_index, payload=to_tensor(value))
        await self._append(self._view, viewlog_pb2.Record(received=record))

    async def drop_out(self, peer: int, round_index: int, reason: str) -> None:
        record = viewlog_pb2.DropOut(peer=peer, round=round_index, reason=reason)
        await self._append(self._view, viewlog_pb2.Record(drop_out=record))

    async def rejected(self, claimed_sender: int, round_index: int, status_code: str, detail: str) -> None:
        record = viewlog_pb2.Rejected(
            claimed_sender=claimed_sender, round=round_index, status_code=status_code, detail=detail[:500]
        )
        await self._append(self._view, viewlog_pb2.Record(rejected=record))

    async def final_output(self, value: np.ndarray, rounds_completed: int) -> None:
        record = viewlog_pb2.FinalOutput(value=to_tensor(value), rounds_completed=rounds_completed)
        await self._append(self._view, viewlog_pb2.Record(final_output=record))

    async def private_input(self, value: np.ndarray, clipped: bool) -> None:
        record = viewlog_pb2.PrivateInput(value=to_tensor(value), clipped=clipped)
        await self._append(self._private, viewlog_pb2.Record(private_input=record))

    async def noise(self, purpose: str, value: np.ndarray) -> None:
        record = viewlog_pb2.NoiseDraw(purpose=purpose, value=to_tensor(value))
        await self._append(self._private, viewlog_pb2.Record(noise=record))

    def close(self) -> None:
        self._view.close()
        self._private.close()
