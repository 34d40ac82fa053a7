"""What the reproductions share: seeds derived by purpose, a seeded virtual run audited, losses by hop distance.

A reproduction's runs are experiments, not deployments: every node draws from the seeded
simulation sampler and every seed is derived from the reproduction's base seed, so the same
`--seed` gives the same runs, audits and figure. That is also what makes a reproduction
resumable (`netdp reproduce --resume`): an audit already finished in its folder is the one the
same seed would give again, so it is read back instead of rerun.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from coordinator_tools import api
from coordinator_tools.audit.html import PAGE_FILE
from coordinator_tools.audit.pairs_file import REPORT_FILE
from coordinator_tools.audit.report_schema import dump_report, load_report
from node.topology import Topology


def derived_seeds(seed: int, purposes: Sequence[str]) -> dict[str, int]:
    """One independent 32-bit seed per purpose, all drawn from the base seed (the same base, the same seeds)."""
    states = np.random.SeedSequence(seed).generate_state(len(purposes))
    return {purpose: int(state) for purpose, state in zip(purposes, states, strict=True)}


def audited_run(folder: Path, topology: Topology, *, noise_seed: int, data: Path | None = None,
                data_seed: int | None = None, **audit_options: object) -> api.Audit:
    """Run `topology` virtually into folder/run (seeded simulation noise) and audit it into folder/audit.

    The nodes' inputs are `data` when given, and the audit reads that folder too (a learning
    run's `utility` block: its test metric); else synthetic values drawn with `data_seed` into
    folder/data, which the audit does not read (protocols that learn nothing refuse data).
    The attack is off unless `audit_options` asks for it: a reproduction compares the
    accountants' columns, and the attack would cost minutes on the papers' graph sizes.

    An audit finished in `folder` (its page, written last, exists) is read back, not rerun; the
    leftovers of one interrupted before that are removed and the run starts again.
    """
    folder = Path(folder)
    finished = folder / "audit" / REPORT_FILE
    if (folder / "audit" / PAGE_FILE).exists() and finished.exists():
        return api.Audit(finished, dump_report(load_report(finished)))
    for leftover in ("run", "audit", "data"):
        if (folder / leftover).is_dir() and not (leftover == "data" and data is not None):
            shutil.rmtree(folder / leftover)
    inputs = data or api.write_data(api.synthetic_data(topology, seed=data_seed), folder / "data")
    run = api.run(topology, inputs, folder / "run", seed=noise_seed).check()
    return api.audit(run, folder / "audit", data=data, **{"attack_pairs": "none", **audit_options})


def by_hop(pairs: pd.DataFrame, column: str) -> pd.DataFrame:
    """Mean, min and max of a pair column per hop distance (Muffliato Fig. 1a's points and bars), finite values only."""
    finite = pairs[np.isfinite(pairs[column]) & np.isfinite(pairs["hop_distance"])]
    return finite.groupby("hop_distance")[column].agg(["mean", "min", "max"])


def rank_trend(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of y with x: -1 when y falls at every step of x, +1 when it rises, 0 when flat."""
    if len(x) < 2 or np.ptp(np.asarray(y, dtype=float)) == 0:
        return 0.0
    return float(stats.spearmanr(x, y).statistic)
