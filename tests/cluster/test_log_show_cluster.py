"""`netdp log show` on the logs of a real run in which a node was killed."""

from __future__ import annotations

from collections import Counter

import pytest

from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir, run_cluster
from node.viewlog import VIEW_LOG_NAME, read_log
from tests.unit.test_log_show import assert_one_line_error, private_values, show, show_json, truncated_copy

pytestmark = pytest.mark.cluster


def test_a_neighbours_listing_shows_the_killed_nodes_drop_outs(make_cluster_files, tmp_path, capsys):
    files = make_cluster_files("ring", 5, sigma=0.5, rounds=4, round_deadline_s=1.0, name="log-show-kill")
    result = run_cluster(files.topology_path, files.data_dir, files.root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=3, kill_at_round={3: 1}))
    assert result.ok and result.nodes[3].killed_by_request
    node_dir = node_log_dir(result.rundir, 2)
    assert 3 in files.topology.neighbours[2]

    code, out, err = show(capsys, str(node_dir))
    assert code == 0 and err == "" and "drop_out" in out and "test-log-show-kill" in out
    document = show_json(capsys, str(node_dir))
    contents = read_log(node_dir / VIEW_LOG_NAME)
    assert document["summary"]["records_by_kind"] == dict(Counter(r.WhichOneof("kind") for r in contents.records))
    assert len(document["records"]) == len(contents.records) - 1
    dropped = {d["peer"]: d["rounds"] for d in document["summary"]["drop_outs"]}
    assert dropped[3] == [d.round for d in contents.of_kind("drop_out") if d.peer == 3] and 3 in dropped
    assert max(dropped[3]) == files.topology.protocol.rounds - 1

    secrets = private_values(node_dir)
    assert secrets
    for argv in ([], ["--json"], ["--values"]):
        assert not any(value in show(capsys, str(node_dir), *argv)[1] for value in secrets), argv
    assert all(value in show(capsys, str(node_dir), "--private")[1] for value in secrets)

    copy = truncated_copy(node_dir / VIEW_LOG_NAME, tmp_path / "torn")
    code, out, _ = show(capsys, str(copy))
    assert code == 0 and "torn_tail" in out
    assert [f["kind"] for f in show_json(capsys, str(copy))["findings"]] == ["torn_tail"]
    assert_one_line_error(*show(capsys, str(result.rundir / "node-99"))[::2], "does not exist")
