"""The exact audit of a DECOR run against Muffliato's at the same size: hypercubes, T = 20, one run each.

Each case runs one protocol on a hypercube (`netdp run --virtual`, the seeded simulation sampler)
and times the whole audit of it (`netdp audit`: replay, every column, the checks, the report). DECOR's
model has n independent and |E| pairwise draws per round (25,600 columns at n = 256, T = 20, against
Muffliato's n), so its exact column reads each view's m × m Gram matrix instead of an SVD of every
draw (`core.full_rank_geometry`). The row is DECOR's seconds over Muffliato's at the same n, measured
in the same suite run; the peak memory is the case process's own (virtual nodes and audit together).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.figures import Row, Sizes
from bench.isolate import Measured
from coordinator_tools import api

PROTOCOLS = ("muffliato", "decor")
ROUNDS = 20


def measure(protocol: str, n: int, rounds: int) -> dict:
    """Seconds of `netdp audit` on a virtual run of `protocol` on the n-node hypercube, `rounds` rounds."""
    topology = api.topology("hypercube", n, protocol=protocol, rounds=rounds, run_id=f"bench-{protocol}")
    values = np.random.default_rng(1).uniform(-0.5, 0.5, size=(n, 1))
    with tempfile.TemporaryDirectory(prefix="netdp-bench-correlated-") as folder:
        run = api.run(topology, api.write_data(values, Path(folder) / "data"), Path(folder) / "run", seed=1).check()
        start = time.perf_counter()
        audit = api.audit(run, Path(folder) / "audit", attack_pairs="none")
        seconds = time.perf_counter() - start
        exact_upper = audit.pairs["exact_eps_upper"].to_numpy()
    print(f"{protocol} audit, hypercube n={n}, T={rounds}: {seconds:.1f} s, ok {audit.ok}", flush=True)
    return {"seconds": seconds, "ok": audit.ok, "exact_eps_upper_max": float(np.nanmax(exact_upper))}


def cases(sizes: Sizes) -> list[dict]:
    return [{"protocol": protocol, "n": n, "rounds": ROUNDS}
            for n in sizes.pick((64, 256), (16, 64)) for protocol in PROTOCOLS]


def rows(done: list[tuple[dict, Measured]]) -> list[Row]:
    """DECOR's audit seconds and peak memory per n, against Muffliato's at the same n."""
    muffliato = {params["n"]: m for params, m in done if params["protocol"] == "muffliato"}
    table = []
    for params, m in done:
        if params["protocol"] != "decor":
            continue
        floor = muffliato.get(params["n"])
        table.append(Row(f"DECOR exact audit, hypercube n={params['n']}, T={params['rounds']}",
                         f"{m.figures['seconds']:.1f} s, peak {m.peak_rss_mib:.0f} MiB",
                         "Muffliato: not run" if floor is None else
                         f"Muffliato {floor.figures['seconds']:.1f} s, peak {floor.peak_rss_mib:.0f} MiB",
                         None if floor is None else m.figures["seconds"] / floor.figures["seconds"],
                         "≤ 2× Muffliato's"))
    return table
