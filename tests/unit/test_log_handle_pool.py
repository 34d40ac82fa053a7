"""The log handle pool: many view-log writers share a bounded number of open descriptors, appends stay durable."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from netdp.v1 import viewlog_pb2
from node.codec import to_tensor
from node.logfiles import LogHandlePool
from node.viewlog import ViewLogWriter, read_log

HEADER = viewlog_pb2.RunHeader(run_id="pool", protocol="muffliato", node_id=0, topology_digest="d",
                               public_parameters_json="{}", sampler_kind="simulation", section="public")


def open_descriptors(directory: Path) -> int:
    """Descriptors this process holds open on files under `directory` (other threads' descriptors, a test's
    neighbours' included, do not count)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between the listing and the look
            continue
        count += target.startswith(f"{directory}{os.sep}")
    return count


def record(writer: int, index: int) -> viewlog_pb2.Record:
    payload = to_tensor(np.array([writer, index, writer * 1000.0 + index / 7.0]))
    return viewlog_pb2.Record(received=viewlog_pb2.MessageReceived(peer=writer, round=index, payload=payload))


def assert_intact(path: Path, writer: int, count: int) -> None:
    contents = read_log(path)
    assert contents.damage is None and not contents.unknown
    assert contents.header is not None and contents.header.run_id == "pool"
    body = contents.records[1:]
    assert [r.WhichOneof("kind") for r in body] == ["received"] * count
    for index, got in enumerate(body):
        expected = record(writer, index)
        got.ClearField("logged_unix")
        assert got == expected


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_more_writers_than_the_cap_keep_descriptors_bounded_and_every_record(tmp_path: Path) -> None:
    cap, writers, appends = 4, 23, 9
    pool = LogHandlePool(cap)
    logs = []
    for w in range(writers):
        logs.append(ViewLogWriter(tmp_path / f"node-{w}" / "view.log", HEADER, pool=pool))
        assert open_descriptors(tmp_path) <= cap
    for index in range(appends):
        for w, log in enumerate(logs):  # round robin: the worst case for an LRU
            log.append(record(w, index))
            assert open_descriptors(tmp_path) <= cap
            assert pool.open_count <= cap
    assert pool.opened > cap  # descriptors really were closed and reopened
    for log in logs:
        log.close()
    assert open_descriptors(tmp_path) == 0 and pool.open_count == 0
    for w in range(writers):
        assert_intact(tmp_path / f"node-{w}" / "view.log", w, appends)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_concurrent_appends_from_more_threads_than_the_cap(tmp_path: Path) -> None:
    cap, writers, appends = 3, 12, 25
    pool = LogHandlePool(cap)
    logs = [ViewLogWriter(tmp_path / f"w{w}.log", HEADER, pool=pool) for w in range(writers)]
    highest = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            highest[0] = max(highest[0], open_descriptors(tmp_path))

    def work(w: int) -> None:
        for index in range(appends):
            logs[w].append_many([record(w, index)])

    watcher = threading.Thread(target=watch)
    watcher.start()
    workers = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    stop.set()
    watcher.join()
    for log in logs:
        log.close()
    assert highest[0] <= cap
    for w in range(writers):
        assert_intact(tmp_path / f"w{w}.log", w, appends)


def test_a_node_s_two_logs_stay_open_for_the_whole_run(tmp_path: Path) -> None:
    """A networked node has two logs: each is opened once, as before the pool existed."""
    pool = LogHandlePool(8)
    view = ViewLogWriter(tmp_path / "view.log", HEADER, pool=pool)
    private = ViewLogWriter(tmp_path / "private.log", HEADER, pool=pool)
    for index in range(20):
        view.append(record(0, index))
        private.append(record(0, index))
    assert pool.opened == 2 and pool.open_count == 2
    view.close()
    private.close()
    assert pool.open_count == 0
    assert [(tmp_path / name).stat().st_mode & 0o777 for name in ("view.log", "private.log")] == [0o600, 0o600]
    assert_intact(tmp_path / "view.log", 0, 20)


def test_a_closed_writer_refuses_appends_and_a_log_removed_underneath_is_not_recreated(tmp_path: Path) -> None:
    pool = LogHandlePool(1)
    first = ViewLogWriter(tmp_path / "a.log", HEADER, pool=pool)
    second = ViewLogWriter(tmp_path / "b.log", HEADER, pool=pool)  # evicts a.log's descriptor
    first.close()
    with pytest.raises(ValueError, match="closed"):
        first.append(record(0, 0))
    second.append(record(1, 0))
    third = ViewLogWriter(tmp_path / "c.log", HEADER, pool=pool)  # evicts b.log's
    (tmp_path / "b.log").unlink()
    with pytest.raises(FileNotFoundError):
        second.append(record(1, 1))  # reopened without O_CREAT: a vanished log is an error, not a fresh file
    assert not (tmp_path / "b.log").exists()
    third.close()
    second.close()


def test_a_pool_needs_room_for_one_descriptor() -> None:
    with pytest.raises(ValueError, match="at least one"):
        LogHandlePool(0)


def test_a_grown_pool_stops_reopening_logs(tmp_path: Path) -> None:
    """Sized below the number of logs, a round robin reopens on every append; grown to fit, never again."""
    pool = LogHandlePool(1)
    logs = [ViewLogWriter(tmp_path / f"{name}.log", HEADER, pool=pool) for name in ("a", "b")]
    for log in logs:
        log.append(record(0, 0))
    assert pool.opened == 4  # each log opened, evicted, reopened
    pool.grow(2)
    pool.grow(1)  # a pool never shrinks
    for index in range(1, 6):
        for log in logs:
            log.append(record(0, index))
    assert pool.capacity == 2 and pool.opened == 5 and pool.open_count == 2  # one last reopen, then none
    for log in logs:
        log.close()
    assert_intact(tmp_path / "a.log", 0, 6)


FIT = """
import os, resource, sys
from node.logfiles import fit_shared_pool
capacity = fit_shared_pool(int(sys.argv[1]))
print(capacity, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


@pytest.mark.parametrize(("limits", "env", "expected"), [
    ((300, 5000), {}, (4096, 4096 + 256)),  # the soft limit is raised toward the hard one: every log fits
    ((300, 1000), {}, (1000 - 256, 1000)),  # only as far as the hard limit: the pool fits what it can
    ((256, 256), {}, (64, 256)),  # no room beyond the spare descriptors: the default pool, evicting as before
    ((300, 5000), {"NETDP_OPEN_LOGS": "10"}, (10, 300)),  # the operator sized the pool: left alone
])
def test_the_shared_pool_is_fitted_to_every_log_as_far_as_the_open_file_limit_allows(limits, env, expected):
    environment = {key: value for key, value in os.environ.items() if key != "NETDP_OPEN_LOGS"} | env
    done = subprocess.run([sys.executable, "-c", FIT, "4096"], capture_output=True, text=True, check=True,
                          env=environment, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits))
    assert tuple(int(word) for word in done.stdout.split()) == expected
