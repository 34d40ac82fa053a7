"""A node process for tests that compare bundled and unbundled runs: it runs the ids of one address of a topology
(plain text, simulation noise seeded 100 + id) and writes how many DeliverBundle calls its server took.

python -m tests.cluster.counting_node TOPOLOGY DATA_DIR RUNDIR FIRST_ID {bundled,alone}
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from netdp.v1 import peer_pb2
from node.data import node_data_file
from node.idset import IdRanges
from node.refusal import Refusal
from node.runtime import NodeConfig, run_process
from node.topology import hosted_ids, load_topology
from node.transport.routing import HostedReceivers

SEED_BASE = 100


def counts_file(rundir: Path, first_id: int) -> Path:
    return rundir / f"bundles-{first_id}.json"


def main(argv: Sequence[str]) -> None:
    topology_path, data_dir, rundir, first, mode = argv
    topology = load_topology(Path(topology_path))
    ids = next(ids for ids in hosted_ids(topology) if ids[0] == int(first))
    taken = {"bundles": 0, "messages": 0}
    deliver_bundle = HostedReceivers.deliver_bundle

    async def counted(self: HostedReceivers, messages: Sequence[peer_pb2.Chunk], identity: IdRanges | None
                      ) -> list[Refusal | None]:
        taken["bundles"] += 1
        taken["messages"] += len(messages)
        return await deliver_bundle(self, messages, identity)

    HostedReceivers.deliver_bundle = counted  # type: ignore[method-assign]
    config = NodeConfig(topology=topology, node_ids=ids,
                        data_paths={v: node_data_file(Path(data_dir), v) for v in ids},
                        log_dirs={v: Path(rundir) / f"node-{v}" for v in ids}, sampler="simulation",
                        simulation_seeds={v: SEED_BASE + v for v in ids}, bundled=mode == "bundled")
    asyncio.run(run_process(config))
    counts_file(Path(rundir), ids[0]).write_text(json.dumps(taken))


if __name__ == "__main__":
    main(sys.argv[1:])
