"""Muffliato-GD's transcript and clip checks (with the private logs) on small virtual runs (`netdp run --virtual`).

Eight nodes learn least squares with targets far beyond the clip, so every example's gradient is
clipped, and with λ > 0, so a logged gradient g = mean of clipped + λθ may exceed C while its data
part stays within it. Two runs: plain gossip on an Erdős–Rényi graph drawn per step, and Chebyshev
gossip on the hypercube, K rounds per step. Every model sent or received is recomputed from the
gradients and draws in the private logs; one draw changed fails the transcript check at the model
it went into, and nodes that clip to 3C pass the transcript check and fail the clip check. A node
that dies after logging a step's gradient, before its draw, leaves a private log the audit reads,
and every model it sent before is reproduced.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.protocols.muffliato_gd.clip import CLIP_CHECK
from coordinator_tools.audit.protocols.muffliato_gd.trajectories import replay_steps
from coordinator_tools.audit.replay import replay_run
from coordinator_tools.audit.replay_checks import replay_checks
from coordinator_tools.cluster.launch import LaunchOptions, node_log_dir
from coordinator_tools.cluster.virtual import run_virtual
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from netdp.v1 import viewlog_pb2
from node import learning
from node.codec import from_tensor, to_tensor
from node.learning import LocalData
from node.noise import SimulationSampler
from node.protocols import muffliato_gd
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.topology import ErdosRenyiSchedule, FixedSchedule, GraphSchedule, NetworkParams, save_topology
from node.transport.inprocess import run_inprocess
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.accounting.simulated_run import rewrite_log
from tests.scripted import Crash, DiesDrawing

N, D, EXAMPLES, STEPS, CLIP, REGULARIZATION = 8, 3, 10, 4, 0.2, 1.0
TRANSCRIPT_CHECK = "transcript reproduces the logged payloads"
NODE, STEP = 5, 1  # where a log is changed


def params(gossip_rounds: int, accelerated: bool, regularization: float) -> MuffliatoGDParams:
    return MuffliatoGDParams(sigma=1.0, sensitivity=2 * CLIP, alpha=2.0, dimension=D, task="least_squares",
                             steps=STEPS, gossip_rounds=gossip_rounds, accelerated=accelerated, learning_rate=0.5,
                             clip=CLIP, adjacency="dataset", regularization=regularization)


def write_data(folder: Path) -> None:
    rng = np.random.default_rng(11)
    folder.mkdir()
    for v in range(N):
        x = rng.normal(size=(EXAMPLES, D))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        np.savez(folder / f"node-{v}.npz", x=x, y=5.0 * x @ np.ones(D))  # |⟨θ, x⟩ − y| far above C at first


def virtual_run(root: Path, gossip_rounds: int, accelerated: bool, schedule: GraphSchedule, *,
                regularization: float = REGULARIZATION) -> Path:
    """A virtual run in root/run (seeded samplers); its data in root/data."""
    topology = build_topology(generate("hypercube", n=N), graph_name="hypercube", run_id=root.name,
                              protocol=params(gossip_rounds, accelerated, regularization), schedule=schedule,
                              network=NetworkParams(round_deadline_s=2.0, startup_deadline_s=5.0))
    assert topology.neighbours_at(NODE, STEP)  # NODE sends the model STEP opens with
    save_topology(topology, root / "topology.json")
    write_data(root / "data")
    result = run_virtual(root / "topology.json", root / "data", root / "run",
                         LaunchOptions(sampler="simulation", simulation_seed=4))
    assert result.ok and not result.timed_out, [(r.node_id, r.stderr_tail) for r in result.failures]
    return root / "run"


RUNS = {"plain-drawn": (2, False, ErdosRenyiSchedule(p=0.5, seed=3)), "chebyshev-fixed": (3, True, FixedSchedule())}


@pytest.fixture(scope="module", params=list(RUNS))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A run's folder and its gossip rounds K per step."""
    gossip_rounds, accelerated, schedule = RUNS[request.param]
    return virtual_run(tmp_path_factory.mktemp(request.param), gossip_rounds, accelerated, schedule), gossip_rounds


def checks(rundir: Path) -> dict[str, tuple[bool, str]]:
    return {check.name: (check.ok, check.detail) for check in replay_checks(replay_run(rundir, with_private_logs=True))}


def logged_gradients(rundir: Path, node: int) -> np.ndarray:
    return np.array([from_tensor(record.value)
                     for record in read_log(node_log_dir(rundir, node) / PRIVATE_LOG_NAME).of_kind("private_input")])


def test_every_model_sent_is_recomputed_and_every_gradient_is_within_the_clip(run: tuple[Path, int]) -> None:
    rundir, _ = run
    views = [read_log(node_log_dir(rundir, v) / VIEW_LOG_NAME) for v in range(N)]
    payloads = sum(len(view.of_kind("sent")) + len(view.of_kind("received")) for view in views)
    steps = replay_steps(replay_run(rundir, with_private_logs=True))
    assert steps.trajectories.ok, steps.trajectories.mismatches[:3]
    assert steps.trajectories.compared == payloads + N  # every model sent and received, and every output
    assert steps.trajectories.max_relative_deviation < 1e-12
    verdict = checks(rundir)
    assert verdict[TRANSCRIPT_CHECK][0] and verdict[CLIP_CHECK][0], verdict
    assert verdict[CLIP_CHECK][1].startswith(f"{N * STEPS} step gradients of {N} nodes")
    # λθ is no part of the clipped data: some logged gradients exceed C, and the check still holds
    assert max(np.linalg.norm(logged_gradients(rundir, v), axis=1).max() for v in range(N)) > CLIP


def test_a_changed_draw_fails_the_transcript_check_from_the_model_it_went_into(run: tuple[Path, int],
                                                                              tmp_path: Path) -> None:
    source, gossip_rounds = run
    rundir = tmp_path / "run"
    shutil.copytree(source, rundir)

    def shift(record: viewlog_pb2.Record) -> viewlog_pb2.Record:
        if record.WhichOneof("kind") == "noise" and record.noise.step == STEP:
            record.noise.value.CopyFrom(to_tensor(from_tensor(record.noise.value) + 0.5))
        return record

    rewrite_log(node_log_dir(rundir, NODE) / PRIVATE_LOG_NAME, shift)
    mismatches = replay_steps(replay_run(rundir, with_private_logs=True)).trajectories.mismatches
    assert mismatches and {finding.kind for finding in mismatches} == {"payload_not_reproduced"}
    models = [tuple(map(int, re.search(r"x_(\d+)\^(\d+)", finding.detail).groups())) for finding in mismatches]
    opened = STEP * gossip_rounds  # the round whose model the draw went into
    assert min(t for _, t in models) == opened and {v for v, t in models if t == opened} == {NODE}
    assert any(finding.node == NODE and finding.detail.startswith(f"sent record of x_{NODE}^{opened} ")
               for finding in mismatches)
    verdict = checks(rundir)
    assert not verdict[TRANSCRIPT_CHECK][0] and verdict[CLIP_CHECK][0]


def test_nodes_clipping_above_the_bound_fail_the_clip_check_alone(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every node clips its examples to 3C, not the published C; without λ the logged gradient is the mean."""
    def loose(task: learning.Task, theta: np.ndarray, x: np.ndarray, y: np.ndarray, *, clip: float,
              regularization: float = 0.0) -> learning.StepGradient:
        return learning.clipped_gradient(task, theta, x, y, clip=3.0 * clip, regularization=regularization)

    monkeypatch.setattr(muffliato_gd, "clipped_gradient", loose)
    rundir = virtual_run(tmp_path, *RUNS["plain-drawn"], regularization=0.0)
    norms = {(v, step): norm for v in range(N) for step, norm in enumerate(np.linalg.norm(logged_gradients(rundir, v),
                                                                                          axis=1))}
    over = sorted(where for where, norm in norms.items() if norm > CLIP)
    assert over
    verdict = checks(rundir)
    assert verdict[TRANSCRIPT_CHECK][0], verdict  # the logs are what the nodes computed
    ok, detail = verdict[CLIP_CHECK]
    node, step = over[0]
    assert not ok and f"; {len(over)} above C, first: node {node}'s step {step} at {norms[over[0]]:.6g}" in detail


def test_a_node_dead_before_a_draw_leaves_a_private_log_that_still_explains_what_it_sent(tmp_path: Path) -> None:
    gossip_rounds, accelerated, schedule = RUNS["plain-drawn"]
    topology = build_topology(generate("hypercube", n=N), graph_name="hypercube", run_id="dies-drawing",
                              protocol=params(gossip_rounds, accelerated, REGULARIZATION), schedule=schedule,
                              network=NetworkParams(round_deadline_s=0.5, startup_deadline_s=2.0))
    save_topology(topology, tmp_path / "topology.json")
    write_data(tmp_path / "data")
    shards = [LocalData(**np.load(tmp_path / "data" / f"node-{v}.npz")) for v in range(N)]
    dying = {NODE: DiesDrawing(SimulationSampler(NODE), at=STEP)}
    outcomes = asyncio.run(run_inprocess(topology, shards, tmp_path, lambda v: dying.get(v) or SimulationSampler(v),
                                         return_exceptions=True))
    assert isinstance(outcomes[NODE], Crash) and all(outcomes[v].steps_completed == STEPS for v in range(N)
                                                     if v != NODE)
    assert len(logged_gradients(tmp_path, NODE)) == STEP + 1  # its gradient of step STEP, not its draw
    replay = replay_run(tmp_path, with_private_logs=True)
    assert NODE in replay.private.inputs
    verdict = {check.name: check.ok for check in replay_checks(replay)}
    assert verdict[TRANSCRIPT_CHECK] and verdict[CLIP_CHECK], verdict
    sent = [record.round for record in read_log(node_log_dir(tmp_path, NODE) / VIEW_LOG_NAME).of_kind("sent")]
    assert sent and max(sent) == STEP * gossip_rounds - 1  # what it sent, all of it before the step it died in
