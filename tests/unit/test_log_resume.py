"""Appending to an existing log at a restart: only this run's log as the node would write it, intact up to a
torn tail (moved aside, so every record reads back), never a finished one; a refusal touches nothing."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from netdp.v1 import viewlog_pb2
from node.errors import LogResumeError
from node.journal import Journal
from node.viewlog import (
    PRIVATE_LOG_NAME,
    VIEW_LOG_NAME,
    ViewLogWriter,
    encode_record,
    read_log,
    read_resumable,
)

HEADER = viewlog_pb2.RunHeader(run_id="resume-test", protocol="personalized-cd", node_id=2, topology_digest="cd" * 32,
                               public_parameters_json='{"agent_budget": {"delta": 0.0, "epsilon": 2.0}, "mu": 1.0}',
                               sampler_kind="secure", section="public", started_unix=1700000000.0)


def drop_out(round_index: int) -> viewlog_pb2.Record:
    return viewlog_pb2.Record(drop_out=viewlog_pb2.DropOut(peer=1, round=round_index, reason="test"))


def header(**changes: object) -> viewlog_pb2.RunHeader:
    """HEADER as a restart would write it (another start time), with `changes`."""
    restarted = viewlog_pb2.RunHeader()
    restarted.CopyFrom(HEADER)
    restarted.started_unix = 1800000000.0
    for name, value in changes.items():
        setattr(restarted, name, value)
    return restarted


def write(path: Path, *records: viewlog_pb2.Record) -> None:
    with ViewLogWriter(path, HEADER) as log:
        log.append_many(list(records))


def rounds(path: Path) -> list[int]:
    return [record.round for record in read_log(path).of_kind("drop_out")]


def test_a_restart_appends_after_the_records_of_its_run_with_no_second_header(tmp_path: Path) -> None:
    path = tmp_path / VIEW_LOG_NAME
    write(path, drop_out(0), drop_out(1))
    resumable = read_resumable(path, header())
    assert resumable.length == path.stat().st_size and rounds(path) == [0, 1]
    with ViewLogWriter(path, header(), resume=resumable) as log:
        log.append(drop_out(2))
    contents = read_log(path)
    assert contents.damage is None and rounds(path) == [0, 1, 2]
    assert [record.WhichOneof("kind") for record in contents.records].count("header") == 1


@pytest.mark.parametrize(("changes", "named"), [
    ({"node_id": 3}, "node_id is 2, this start's 3"),
    ({"topology_digest": "ef" * 32}, "topology_digest"),
    ({"sampler_kind": "simulation"}, "sampler_kind"),
    ({"public_parameters_json": '{"agent_budget": {"delta": 0.0, "epsilon": 3.0}, "mu": 1.0}'},
     'agent_budget is {"delta": 0.0, "epsilon": 2.0}, this start\'s {"delta": 0.0, "epsilon": 3.0}'),
])
def test_a_log_of_another_run_or_setting_is_refused_untouched(tmp_path: Path, changes: dict, named: str) -> None:
    path = tmp_path / VIEW_LOG_NAME
    write(path, drop_out(0))
    before = path.read_bytes()
    with pytest.raises(LogResumeError, match="not this node's log as it would start now") as refused:
        read_resumable(path, header(**changes))
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert path.read_bytes() == before


def test_a_torn_tail_is_moved_aside_and_every_record_reads_back_after_the_restart(tmp_path: Path) -> None:
    path = tmp_path / VIEW_LOG_NAME
    write(path, drop_out(0))
    intact = path.stat().st_size
    torn = encode_record(drop_out(1))[:-3]  # the crash cut the last write short
    with open(path, "ab") as log:
        log.write(torn)
    assert read_log(path).damage.kind == "torn_tail"
    resumable = read_resumable(path, header())
    assert resumable.length == intact
    with ViewLogWriter(path, header(), resume=resumable) as log:
        log.append(drop_out(2))
    contents = read_log(path)
    assert contents.damage is None and rounds(path) == [0, 2]
    assert (tmp_path / f"{VIEW_LOG_NAME}.torn-at-{intact}").read_bytes() == torn


def test_a_restarted_node_s_logs_and_a_torn_tail_set_aside_are_private_files(tmp_path: Path) -> None:
    """A log an earlier netdp left readable by all (0644) is made 0600 when a restart appends to it."""
    journal = Journal(tmp_path, HEADER)
    journal.close()
    view, private = tmp_path / VIEW_LOG_NAME, tmp_path / PRIVATE_LOG_NAME
    assert [stat.S_IMODE(path.stat().st_mode) for path in (view, private)] == [0o600, 0o600]
    view.chmod(0o644)
    intact = view.stat().st_size
    with open(view, "ab") as log:
        log.write(encode_record(drop_out(0))[:-2])
    Journal(tmp_path, HEADER, resume=True).close()
    aside = tmp_path / f"{VIEW_LOG_NAME}.torn-at-{intact}"
    assert [stat.S_IMODE(path.stat().st_mode) for path in (view, private, aside)] == [0o600, 0o600, 0o600]


def test_damage_before_the_end_a_finished_run_and_a_missing_log_are_refused(tmp_path: Path) -> None:
    path = tmp_path / VIEW_LOG_NAME
    write(path, drop_out(0), drop_out(1))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # a complete record whose checksum fails: damage, not a write the crash cut short
    path.write_bytes(bytes(data))
    with pytest.raises(LogResumeError, match="damaged at byte"):
        read_resumable(path, header())
    finished = tmp_path / "finished.log"
    write(finished, viewlog_pb2.Record(final_output=viewlog_pb2.FinalOutput(rounds_completed=1)))
    with pytest.raises(LogResumeError, match="run is over"):
        read_resumable(finished, header())
    with pytest.raises(LogResumeError, match="no run to rejoin"):
        read_resumable(tmp_path / "absent.log", header())


def test_a_journal_checks_both_logs_before_it_touches_either(tmp_path: Path) -> None:
    first = Journal(tmp_path, HEADER)
    first.close()
    view, private = tmp_path / VIEW_LOG_NAME, tmp_path / PRIVATE_LOG_NAME
    with open(view, "ab") as log:
        log.write(encode_record(drop_out(0))[:5])  # a torn view, which a resume would move aside
    private.unlink()
    with ViewLogWriter(private, header(section="private", node_id=7)):
        pass  # a private log of another node
    before = view.read_bytes(), private.read_bytes()
    with pytest.raises(LogResumeError, match="node_id is 7"):
        Journal(tmp_path, HEADER, resume=True)
    assert (view.read_bytes(), private.read_bytes()) == before
    assert not list(tmp_path.glob("*.torn-at-*"))


def test_resume_in_an_empty_folder_is_a_fresh_start(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "node-0", HEADER, resume=True)
    journal.close()
    assert journal.resumed is None
    assert read_log(tmp_path / "node-0" / VIEW_LOG_NAME).header.run_id == HEADER.run_id
