"""Synchronous gossip round latency and CPU per round of two source trees (before / after a change).

Runs bench.gossip's netdp cluster from the old tree and from the new one alternately, the
order flipped every repetition so that a drift of the machine's load weighs on both. Each
run's code is its own tree's, whole: topology, launcher, node processes, log reader (the case
runs in a child process with that tree first on its import path and as working directory; the
suite's own modules come after it). Wall time per round on a shared machine moves with
whatever else runs, CPU time does not: every repetition also runs each tree for SHORT_ROUNDS
rounds, and the CPU seconds of the long run minus the short one's, over the extra rounds, is
the tree's CPU per round with start-up and shutdown cancelled out.

Make the old tree with `git worktree add /tmp/netdp-old COMMIT` (regenerate its proto stubs
with its proto/generate.py if they are missing).

Usage: python -m bench.refactor OLD_TREE [--new-tree DIR] [--repetitions 3] [--n 16] [--rounds 70]
       [--dimension 16] [--out bench/results/refactor.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench.isolate import Measured, run_case
from bench.report import ROOT, machine, write

SHORT_ROUNDS = 10


def tree_run(tree: Path, n: int, rounds: int, dimension: int) -> Measured:
    """bench.gossip.netdp_round_ms with the code of `tree`; refuses a run that imported another tree."""
    tree = tree.resolve()
    measured = run_case("bench.gossip:netdp_round_ms", {"n": n, "rounds": rounds, "dimension": dimension, "pings": 0},
                        timeout_s=900.0, cwd=tree, pythonpath=[tree, tree / "proto", ROOT])
    if Path(measured.figures["source"]) != tree:
        raise RuntimeError(f"the nodes ran the code of {measured.figures['source']}, not of {tree}")
    return measured


def tree_figures(runs: list[list[float]], cpu_ms: list[float]) -> dict[str, object]:
    """Median over every round of every run, each run's own median (the spread), and CPU per round."""
    return {"median_ms_per_round": statistics.median([ms for run in runs for ms in run]),
            "run_medians_ms": [statistics.median(run) for run in runs],
            "rounds_measured": sum(len(run) for run in runs),
            "median_cpu_ms_per_round": statistics.median(cpu_ms), "cpu_ms_per_round": cpu_ms}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.refactor", description=__doc__.splitlines()[0])
    parser.add_argument("old_tree", type=Path)
    parser.add_argument("--new-tree", type=Path, default=ROOT)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=70)
    parser.add_argument("--dimension", type=int, default=16)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "refactor.json")
    args = parser.parse_args()
    if args.rounds <= SHORT_ROUNDS:
        parser.error(f"--rounds must exceed the {SHORT_ROUNDS} rounds of the short run")

    trees = {"old": args.old_tree, "new": args.new_tree}
    runs: dict[str, list[list[float]]] = {"old": [], "new": []}
    cpu: dict[str, list[float]] = {"old": [], "new": []}
    for repetition in range(args.repetitions):
        for label in ("old", "new") if repetition % 2 == 0 else ("new", "old"):
            short = tree_run(trees[label], args.n, SHORT_ROUNDS, args.dimension)
            long = tree_run(trees[label], args.n, args.rounds, args.dimension)
            runs[label].append(long.figures["round_ms"])
            cpu[label].append((long.cpu_s - short.cpu_s) / (args.rounds - SHORT_ROUNDS) * 1000)
            print(f"repetition {repetition + 1}, {label}: median {statistics.median(runs[label][-1]):.1f} ms "
                  f"per round, {cpu[label][-1]:.1f} CPU ms per round", flush=True)

    old, new = tree_figures(runs["old"], cpu["old"]), tree_figures(runs["new"], cpu["new"])
    result = {"machine": machine(), "n": args.n, "rounds": args.rounds, "dimension": args.dimension,
              "repetitions": args.repetitions, "old_tree": str(args.old_tree.resolve()),
              "new_tree": str(args.new_tree.resolve()), "old": old, "new": new,
              "new_over_old_ratio": new["median_ms_per_round"] / old["median_ms_per_round"],
              "new_over_old_cpu_ratio": new["median_cpu_ms_per_round"] / old["median_cpu_ms_per_round"]}
    write(result, args.out)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
