"""Regenerate the Python stubs beside the .proto files (run from anywhere).

The stubs are committed so that installing netdp needs no code generator; the test
suite regenerates them into a temporary folder and fails if anything differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
PROTO_FILES = sorted(PROTO_ROOT.glob("netdp/v1/*.proto"))


def generate(out_dir: Path) -> None:
    """Write *_pb2.py, *_pb2.pyi and *_pb2_grpc.py for every .proto into out_dir."""
    include = Path(protoc.__file__).resolve().parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(p.relative_to(PROTO_ROOT)) for p in PROTO_FILES),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT)
