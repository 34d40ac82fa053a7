"""Bundled deliveries are invisible to the audit: one seed, a run bundled and a run message by message, and every
view-log record of every node compares equal (only the times a record was logged or a log started differ)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from netdp.v1 import viewlog_pb2
from node.noise import make_samplers
from node.transport import bundles
from node.transport.inprocess import run_inprocess
from node.viewlog import VIEW_LOG_NAME, read_log

NODES, ROUNDS = 16, 3


def untimed(record: viewlog_pb2.Record) -> bytes:
    """The record's bytes without the moments it was logged (and, for the header, the log started)."""
    copy = viewlog_pb2.Record()
    copy.CopyFrom(record)
    copy.ClearField("logged_unix")
    if copy.WhichOneof("kind") == "header":
        copy.header.ClearField("started_unix")
    return copy.SerializeToString(deterministic=True)


def view_records(root: Path, node: int) -> list[bytes]:
    contents = read_log(root / f"node-{node}" / VIEW_LOG_NAME)
    assert contents.damage is None
    return [untimed(record) for record in contents.records]


def test_a_bundled_run_logs_exactly_what_an_unbundled_run_logs(make_cluster_files, tmp_path, monkeypatch):
    files = make_cluster_files("hypercube", NODES, sigma=0.5, rounds=ROUNDS, dimension=4, round_deadline_s=60.0,
                               name="bundles")
    sizes: list[int] = []
    accept_bundle = bundles.accept_bundle

    async def counted(items):
        sizes.append(len(items))
        return await accept_bundle(items)

    monkeypatch.setattr(bundles, "accept_bundle", counted)
    outcomes = {}
    for bundled in (True, False):
        outcomes[bundled] = asyncio.run(run_inprocess(
            files.topology, files.values, tmp_path / str(bundled), lambda v: make_samplers("simulation", 100 + v),
            bundled=bundled))
    messages = NODES * len(files.topology.neighbours[0]) * ROUNDS
    assert sum(sizes) == messages and len(sizes) < messages / 4  # the bundled run: every message, in bundles
    for node in range(NODES):
        bundled, alone = view_records(tmp_path / "True", node), view_records(tmp_path / "False", node)
        # Messages of one round arrive in another order from run to run: the same records, compared as a multiset.
        assert sorted(bundled) == sorted(alone), node
        kinds = [record.WhichOneof("kind") for record in read_log(tmp_path / "True" / f"node-{node}" /
                                                                    VIEW_LOG_NAME).records]
        degree = len(files.topology.neighbours[node])
        assert kinds.count("received") == kinds.count("sent") == ROUNDS * degree  # every message, none dropped
        assert "drop_out" not in kinds and "rejected" not in kinds
        assert (outcomes[True][node].estimate == outcomes[False][node].estimate).all()
