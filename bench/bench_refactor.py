"""Benchmark: synchronous gossip round latency of two source trees (before / after a refactor).

Runs bench_gossip.py's netdp cluster (16 node processes, hypercube, synchronous Muffliato)
from the old tree and from the new one alternately, the order flipped every repetition
(old-new, new-old, ...) so that a drift of the machine's load weighs on both alike. Each
run's code is its own tree's, whole: topology, launcher, node processes, log reader
(bench_gossip.py --source). Reports the median ms per round of each tree over all its
runs, the ratio new/old, and each run's median for the spread.

Wall time per round on a shared 2-core machine moves with whatever else runs; CPU time does
not. So every repetition also runs each tree for SHORT_ROUNDS rounds, and the CPU seconds (user
+ system, every process of the run) of the long run minus those of the short one, over the
extra rounds, is that tree's CPU cost per round with start-up and shutdown cancelled out.

Make the old tree with `git worktree add /tmp/netdp-old COMMIT`; its committed proto stubs
are used as they are (regenerate them with its proto/generate.py if they are missing).

Usage: .venv/bin/python bench/bench_refactor.py OLD_TREE [--new-tree DIR] [--repetitions 3] [--n 16]
       [--rounds 70] [--dimension 16]
Writes bench/results/refactor.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
from pathlib import Path

from bench_gossip import netdp_figures_from

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SHORT_ROUNDS = 10


def children_cpu_s() -> float:
    """User + system CPU seconds of every finished child process (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured_run(tree: Path, n: int, rounds: int, dimension: int) -> tuple[dict[str, object], float]:
    """bench_gossip's figures of one run from `tree`, and the CPU seconds the whole run took."""
    before = children_cpu_s()
    figures = netdp_figures_from(tree, n, rounds, dimension, pings=0)
    return figures, children_cpu_s() - before


def tree_figures(runs: list[list[float]], cpu_ms: list[float]) -> dict[str, object]:
    """Median over every round of every run, each run's own median (the spread), and CPU per round."""
    return {
        "median_ms_per_round": statistics.median([ms for run in runs for ms in run]),
        "run_medians_ms": [statistics.median(run) for run in runs],
        "rounds_measured": sum(len(run) for run in runs),
        "median_cpu_ms_per_round": statistics.median(cpu_ms),
        "cpu_ms_per_round": cpu_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_tree", type=Path)
    parser.add_argument("--new-tree", type=Path, default=ROOT)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=70)
    parser.add_argument("--dimension", type=int, default=16)
    args = parser.parse_args()

    trees = {"old": args.old_tree, "new": args.new_tree}
    if args.rounds <= SHORT_ROUNDS:
        parser.error(f"--rounds must exceed the {SHORT_ROUNDS} rounds of the short run")
    runs: dict[str, list[list[float]]] = {"old": [], "new": []}
    cpu: dict[str, list[float]] = {"old": [], "new": []}
    for repetition in range(args.repetitions):
        for label in ("old", "new") if repetition % 2 == 0 else ("new", "old"):
            _, short_cpu_s = measured_run(trees[label], args.n, SHORT_ROUNDS, args.dimension)
            figures, long_cpu_s = measured_run(trees[label], args.n, args.rounds, args.dimension)
            runs[label].append(figures["round_ms"])
            cpu[label].append((long_cpu_s - short_cpu_s) / (args.rounds - SHORT_ROUNDS) * 1000)
            print(f"repetition {repetition + 1}, {label} ({figures['source']}): "
                  f"median {statistics.median(figures['round_ms']):.1f} ms per round, "
                  f"{cpu[label][-1]:.1f} CPU ms per round", flush=True)

    old, new = tree_figures(runs["old"], cpu["old"]), tree_figures(runs["new"], cpu["new"])
    result = {
        "n": args.n, "rounds": args.rounds, "dimension": args.dimension, "repetitions": args.repetitions,
        "old_tree": str(args.old_tree.resolve()), "new_tree": str(args.new_tree.resolve()),
        "old": old, "new": new,
        "new_over_old_ratio": new["median_ms_per_round"] / old["median_ms_per_round"],
        "new_over_old_cpu_ratio": new["median_cpu_ms_per_round"] / old["median_cpu_ms_per_round"],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "refactor.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
