"""Canaries and deliberate breaks on the node side: what a node plants, logs, sends and refuses."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest

from coordinator_tools.cluster.launch import with_canaries
from coordinator_tools.dataprep.datasets import synthetic_values
from coordinator_tools.topology.build import build_topology
from coordinator_tools.topology.generators import generate
from node.breaks import LEAK, Breaks
from node.canaries import Canaries
from node.codec import from_tensor
from node.errors import ConfigError
from node.noise import make_samplers
from node.protocols.muffliato import MuffliatoParams
from node.protocols.ring_histogram import RingHistogramParams
from node.transport.inprocess import run_inprocess
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

N, D, M = 4, 3, 64


def ring(canaries: int = M, **fields: object) -> object:
    params = MuffliatoParams(sigma=0.5, sensitivity=1.0, alpha=2.0, rounds=2, dimension=D, canaries=canaries,
                             **fields)
    return build_topology(generate("ring", n=N), graph_name="ring", run_id="canaries", protocol=params)


def test_breaks_parse_every_kind_and_refuse_the_rest():
    breaks = Breaks.parsed(["noise-scale=0.25", "skip-clip", "leak-raw"])
    assert breaks == Breaks(noise_scale=0.25, skip_clip=True, leak_raw=True)
    assert Breaks.parsed(breaks.specs()) == breaks  # what a node process is handed back
    assert breaks.header() == {"noise_scale": 0.25, "skip_clip": True, "leak_raw": True}
    assert Breaks().header() == {} and not Breaks().active
    assert breaks.clip_bound(0.5) == math.inf and Breaks().clip_bound(0.5) == 0.5
    for bad in ("noise-scale=-1", "noise-scale=x", "noise-scale=inf", "skip", "leak-raw=1"):
        with pytest.raises(ConfigError, match="--break"):
            Breaks.parsed([bad])


def test_canaries_follow_the_contribution_at_half_the_sensitivity():
    canaries = Canaries(np.array([1.0, -1.0, 1.0]))
    planted = canaries.planted(np.array([0.1, 0.2]), sensitivity=0.5)
    assert planted.tolist() == [0.1, 0.2, 0.25, -0.25, 0.25]  # a flipped sign moves the contribution by 0.5
    for kind in ("secure", "simulation"):
        signs = make_samplers(kind, None if kind == "secure" else 3).coins.flip(4000)
        assert set(signs.tolist()) == {-1.0, 1.0} and abs(signs.mean()) < 0.1  # fair within 6 standard deviations


def test_an_audit_run_publishes_its_canaries_and_only_where_a_coordinate_carries_them():
    plain = ring(canaries=0)
    published = with_canaries(plain, 40)
    assert published.protocol.canaries == 40 and published.protocol.vector_length == D + 40
    assert published.digest != plain.digest and with_canaries(plain, 0) is plain
    with pytest.raises(ConfigError, match="at least 2"):
        with_canaries(plain, 1)
    histogram = build_topology(generate("ring", n=N), graph_name="ring", run_id="h",
                               protocol=RingHistogramParams(categories=3, gamma=0.5))
    with pytest.raises(ConfigError, match="no vector coordinates"):
        with_canaries(histogram, 40)


def run_ring(tmp_path, breaks=None):
    topology = ring()
    values = synthetic_values(N, D, 10.0, seed=1)  # beyond the ball of radius 1/2: clipping matters
    outcomes = asyncio.run(run_inprocess(topology, list(values), tmp_path, lambda v: make_samplers("simulation", v),
                                         breaks=breaks or {}))
    return topology, outcomes


def test_every_node_plants_its_own_signs_logged_privately_never_in_its_view(tmp_path):
    topology, outcomes = run_ring(tmp_path)
    signs = {}
    for v in range(N):
        private = read_log(tmp_path / f"node-{v}" / PRIVATE_LOG_NAME)
        (record,) = private.of_kind("canaries")
        signs[v] = from_tensor(record.signs)
        assert record.magnitude == 0.5 and set(signs[v].tolist()) <= {-1.0, 1.0}
        (contribution,) = private.of_kind("private_input")
        planted = from_tensor(contribution.value)
        assert planted.size == D + M and np.array_equal(planted[D:], 0.5 * signs[v])
        assert np.linalg.norm(planted[:D]) == pytest.approx(0.5)  # the data coordinates were clipped
        view = (tmp_path / f"node-{v}" / VIEW_LOG_NAME).read_bytes()
        assert signs[v].astype("<f8").tobytes() not in view and (0.5 * signs[v]).astype("<f8").tobytes() not in view
        assert len(outcomes[v].estimate) == D + M
    assert len({tuple(s) for s in signs.values()}) == N  # each node drew its own


def test_breaks_are_in_the_header_and_do_what_they_say(tmp_path):
    run_ring(tmp_path, {1: Breaks(noise_scale=0.0, skip_clip=True, leak_raw=True)})
    view = read_log(tmp_path / "node-1" / VIEW_LOG_NAME)
    assert json.loads(view.header.public_parameters_json)["break"] == {
        "noise_scale": 0.0, "skip_clip": True, "leak_raw": True}
    assert "break" not in json.loads(read_log(tmp_path / "node-0" / VIEW_LOG_NAME).header.public_parameters_json)
    private = read_log(tmp_path / "node-1" / PRIVATE_LOG_NAME)
    (contribution,) = private.of_kind("private_input")
    planted = from_tensor(contribution.value)
    assert np.linalg.norm(planted[:D]) > 1.0  # not clipped
    (draw,) = private.of_kind("noise")
    assert draw.scale == 0.5 and not np.any(from_tensor(draw.value))  # logged at the published scale, drawn at 0
    leaked = [record for record in view.of_kind("sent") if record.kind == LEAK]
    assert len(leaked) == 2 and all(np.array_equal(from_tensor(r.payload), planted) for r in leaked)
    for neighbour in (0, 2):  # the raw value reached both neighbours, refused, and is in their views
        refused = [r for r in read_log(tmp_path / f"node-{neighbour}" / VIEW_LOG_NAME).of_kind("rejected")
                   if r.kind == LEAK]
        assert len(refused) == 1 and refused[0].claimed_sender == 1
        assert np.array_equal(from_tensor(refused[0].payload), planted)
