"""Bundled deliveries against message by message: one virtual hypercube, both ways, back to back in one process.

The same topology, inputs and seeds run once with the one-way messages of each turn handed
over in bundles (`node.transport.bundles`, what every run does) and once message by message
(each delivery its own tasks, timer and log commit, as before bundles). A round's time is
read from the view logs as in the `virtual` benchmark; the CPU time per message is the
process's CPU time over the run (set-up included) divided by the messages sent. The ratio is
bundled over message by message: below 1 is the saving.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.figures import Row, Sizes
from bench.isolate import Measured
from bench.viewlogs import round_seconds
from bench.virtual import DIMENSION, hypercube_muffliato
from coordinator_tools.cluster.virtual import LOGS_PER_NODE
from coordinator_tools.dataprep.datasets import synthetic_values
from node.logfiles import fit_shared_pool
from node.noise import make_samplers
from node.transport.inprocess import run_inprocess


def run_once(n: int, rounds: int, *, bundled: bool) -> dict:
    """One in-process run: its median s/round, wall and CPU seconds, and drop-outs."""
    topology = hypercube_muffliato(n, rounds, [f"127.0.0.1:{20000 + v}" for v in range(n)])
    values = synthetic_values(n, DIMENSION, 1.0, 1)
    fit_shared_pool(LOGS_PER_NODE * n)  # as `netdp run --virtual` does
    with tempfile.TemporaryDirectory(prefix=f"netdp-bench-bundles-{n}-") as folder:
        wall, cpu = time.perf_counter(), time.process_time()
        asyncio.run(run_inprocess(topology, values, Path(folder), lambda v: make_samplers("simulation", v),
                                  bundled=bundled))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        per_round, drop_outs = round_seconds(Path(folder), n, rounds)
    messages = n * len(topology.neighbours[0]) * rounds
    return {"round_s_median": statistics.median(per_round), "round_s_each": per_round, "run_wall_s": wall,
            "cpu_ms_per_message": cpu * 1000 / messages, "drop_outs": drop_outs}


def measure(n: int, rounds: int) -> dict:
    """Bundled, then message by message, in this one process."""
    return {"bundled": run_once(n, rounds, bundled=True), "alone": run_once(n, rounds, bundled=False)}


def cases(sizes: Sizes) -> list[dict]:
    return [{"n": max(sizes.virtual_n), "rounds": sizes.pick(5, 3)}]


def rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    table = []
    for params, measured in done:
        bundled, alone = measured.figures["bundled"], measured.figures["alone"]
        table.append(Row(f"virtual round bundled, n={params['n']} hypercube, D={DIMENSION}",
                         f"{bundled['round_s_median']:.2f} s", f"message by message {alone['round_s_median']:.2f} s",
                         bundled["round_s_median"] / alone["round_s_median"], "≤ 2 s at n=2048"))
        table.append(Row(f"CPU per message bundled, n={params['n']}", f"{bundled['cpu_ms_per_message']:.3f} ms",
                         f"message by message {alone['cpu_ms_per_message']:.3f} ms",
                         bundled["cpu_ms_per_message"] / alone["cpu_ms_per_message"]))
    return table
