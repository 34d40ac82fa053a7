"""netdp's benchmark suite: `python -m bench` runs every benchmark and writes one JSON document.

Each figure is a ratio against a floor measured in the same run (bare gRPC, a dense
implementation, a theorem's bound), so that the machine's speed cancels out.
"""
