"""`python -m bench`: run the suite (or some of it) and print the table; see bench/__init__.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.figures import Sizes
from bench.report import ROOT
from bench.suite import BENCHMARKS, run_suite


def main() -> None:
    names = [benchmark.name for benchmark in BENCHMARKS]
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Run netdp's benchmarks; write one JSON document and print a table.",
        epilog="Benchmarks: " + "; ".join(f"{b.name}: {b.summary}" for b in BENCHMARKS))
    parser.add_argument("--quick", action="store_true", help="small sizes: check that the suite runs end to end")
    parser.add_argument("--only", default=",".join(names),
                        help=f"comma-separated benchmarks (default all: {','.join(names)})")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "results.json",
                        help="JSON document to write (default bench/results/results.json)")
    parser.add_argument("--virtual-n", type=int, nargs="+", help="virtual run sizes (default 256 1024 2048)")
    parser.add_argument("--audit-n", type=int, nargs="+", help="audit sizes (default 256 1024 2048)")
    parser.add_argument("--utility-n", type=int, help="nodes of the utility runs (default 256)")
    args = parser.parse_args()
    unknown = set(args.only.split(",")) - set(names)
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; choose from {', '.join(names)}")
    sizes = Sizes(quick=args.quick,
                  virtual_n=tuple(args.virtual_n or ((64, 128) if args.quick else (256, 1024, 2048))),
                  audit_n=tuple(args.audit_n or ((64, 128) if args.quick else (256, 1024, 2048))),
                  utility_n=args.utility_n or (16 if args.quick else 256))
    print(run_suite(args.only.split(","), sizes, args.out))


if __name__ == "__main__":
    main()
