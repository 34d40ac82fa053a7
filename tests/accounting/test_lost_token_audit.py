"""A token walk whose holder dies during its visit, audited from its real view logs (in-process transport).

The walk follows a scripted path; the holder of hop DIES_AT takes the token, logs its input and dies
as it draws its noise, so the walk stops there and every other node gives up at the run deadline.
The audit reports the token lost (the chain check fails, `token_lost`), reads every private log
(a visit cut short before its draw is what a crash leaves), and recomputes every token value that
was logged (the transcript check passes); a draw changed in a survivor's private log still fails it.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.protocols.base import Replay
from coordinator_tools.audit.protocols.token_sum import CHAIN_CHECK
from coordinator_tools.audit.protocols.token_sum.trajectories import check_trajectories
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.replay_checks import replay_checks
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node.codec import from_tensor, to_tensor
from node.learning import LocalData
from node.noise import SimulationSampler
from node.protocols import token_sum
from node.protocols.rw_sgd import RwSgdParams
from node.protocols.walk_sum import WalkSumParams
from node.topology import NetworkParams, save_topology
from node.transport.inprocess import run_inprocess
from node.viewlog import PRIVATE_LOG_NAME, read_log
from tests.accounting.simulated_run import rewrite_log
from tests.scripted import Crash, DiesDrawing, ScriptedPath

N, D = 4, 2
PATH = (0, 1, 2, 2, 3, 1)  # hop h's holder; node 3 takes hop 4 and dies as it draws
DIES_AT = 4
DYING = PATH[DIES_AT]
NETWORK = NetworkParams(round_deadline_s=0.3, startup_deadline_s=1.0)
TRANSCRIPT_CHECK = "transcript reproduces the logged payloads"


def walk_sum() -> tuple[WalkSumParams, list[np.ndarray]]:
    values = list(np.random.default_rng(7).normal(size=(N, D)) * 0.2)  # inside the ball of radius Δ/2
    return WalkSumParams(sigma=1.0, sensitivity=1.0, alpha=2.0, dimension=D, steps=len(PATH)), values


def rw_sgd() -> tuple[RwSgdParams, list[LocalData]]:
    rng = np.random.default_rng(8)
    shards = [LocalData(rng.normal(size=(5, D)), rng.normal(size=5)) for _ in range(N)]
    params = RwSgdParams(sigma=1.0, sensitivity=2.0, alpha=2.0, dimension=D, task="least_squares",
                         learning_rate=0.1, clip=1.0, adjacency="dataset", steps=len(PATH))
    return params, shards


def sampler_for(node: int) -> SimulationSampler | DiesDrawing:
    return DiesDrawing(SimulationSampler(node)) if node == DYING else SimulationSampler(node)


@pytest.fixture(scope="module", params=[walk_sum, rw_sgd], ids=["walk-sum", "rw-sgd"])
def lost_walk(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The walk along PATH on the complete graph until node DYING dies at hop DIES_AT; the others time out."""
    params, values = request.param()
    root = tmp_path_factory.mktemp(params.name)
    topology = build_topology(generate("complete", n=N), graph_name="complete", run_id="lost-walk", protocol=params,
                              network=NETWORK)
    save_topology(topology, root / "topology.json")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(token_sum, "_PATH_DRAWS", ScriptedPath(PATH))
        outcomes = asyncio.run(run_inprocess(topology, values, root, sampler_for, return_exceptions=True))
    assert isinstance(outcomes[DYING], Crash)
    assert all(isinstance(outcomes[v], token_sum.TokenWalkError) for v in range(N) if v != DYING)
    private = read_log(root / f"node-{DYING}" / PRIVATE_LOG_NAME)
    assert (len(private.of_kind("private_input")), len(private.of_kind("noise"))) == (1, 0)  # input logged, no draw
    return root


def checks(replay: Replay) -> dict[str, bool]:
    return {check.name: check.ok for check in replay_checks(replay)}


def test_a_holder_dead_before_its_draw_loses_the_token_and_every_logged_value_is_reproduced(lost_walk: Path) -> None:
    replay = replay_run(lost_walk, with_private_logs=True)
    assert not [finding for finding in replay.node_problems if finding.kind == "incomplete_private_log"]
    assert set(replay.private.inputs) == set(range(N))
    lost = [finding for finding in replay.consistency if finding.kind == "token_lost"]
    assert [(finding.node, finding.severity) for finding in lost] == [(DYING, "error")]
    assert replay.realized.holders().tolist() == list(PATH[:DIES_AT + 1])
    verdict = checks(replay)
    assert not verdict[CHAIN_CHECK] and verdict[TRANSCRIPT_CHECK]
    transcript = next(check for check in replay_checks(replay) if check.name == TRANSCRIPT_CHECK)
    # the token's value at hops 1..4, each sent once and received once (node 2 kept hop 3: no message)
    assert transcript.detail.startswith(f"{2 * (DIES_AT - 1)} logged payloads")


def test_a_changed_draw_before_the_loss_still_fails_the_transcript_check(lost_walk: Path, tmp_path: Path) -> None:
    root = tmp_path / "run"
    shutil.copytree(lost_walk, root)

    def shift(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "noise":
            record.noise.value.CopyFrom(to_tensor(from_tensor(record.noise.value) + 0.5))
        return record

    rewrite_log(root / f"node-{PATH[2]}" / PRIVATE_LOG_NAME, shift)  # node 2's draws of hops 2 and 3
    check = check_trajectories(replay_run(root, with_private_logs=True))
    # the value at prefix 4 that node 2 handed to node 3 (it kept prefix 3: no message), as both logged it
    assert {(finding.kind, finding.node) for finding in check.mismatches} == {("payload_not_reproduced", PATH[3]),
                                                                            ("payload_not_reproduced", DYING)}
    assert all("prefix 4" in finding.detail for finding in check.mismatches)
