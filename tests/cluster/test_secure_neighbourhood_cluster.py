"""Secure-neighbourhood gossip on real node processes over gRPC with mutual TLS: nodes that share a neighbour but
are no neighbours agree their secrets directly on the wire, and the run audits clean.

Starts real node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from node.codec import from_tensor
from node.pairwise_secrets import SECRET_PURPOSE, SECURE_MECHANISM
from node.protocols.secure_neighbourhood import SecureNeighbourhoodParams
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.cluster.conftest import MakeClusterFiles
from tests.cluster.test_decor_cluster import netdp

pytestmark = pytest.mark.cluster


def test_co_neighbours_agree_on_the_wire_and_the_masked_run_audits_clean(make_cluster_files: MakeClusterFiles) -> None:
    # On the 4-ring, 0 and 2 (and 1 and 3) are no neighbours: their key shares pass only because they share one.
    files = make_cluster_files("ring", 4, name="secure-neighbourhood", round_deadline_s=3.0,
                               protocol=SecureNeighbourhoodParams(sigma=0.5, alpha=2.0, dimension=2, rounds=3))
    root = files.root
    netdp(root, "certs", "topology.json", "--out", "certs")
    netdp(root, "run", "topology.json", "--data", "data", "--out", "r", "--certs", "certs", "--canaries", "16")
    agreed: dict[tuple[int, int], bytes] = {}
    for v in range(4):
        node_dir = root / "r" / f"node-{v}"
        view = (node_dir / VIEW_LOG_NAME).read_bytes()
        secrets = [d for d in read_log(node_dir / PRIVATE_LOG_NAME).of_kind("noise") if d.purpose == SECRET_PURPOSE]
        assert [(d.step, d.mechanism) for d in secrets] == [((v + 2) % 4, SECURE_MECHANISM)]
        secret = bytes(from_tensor(secrets[0].value).astype(np.uint8))
        assert secret not in view
        agreed.setdefault((min(v, (v + 2) % 4), max(v, (v + 2) % 4)), secret)
        assert agreed[min(v, (v + 2) % 4), max(v, (v + 2) % 4)] == secret  # both ends hold the same secret
    assert sorted(agreed) == [(0, 2), (1, 3)] and len(set(agreed.values())) == 2
    netdp(root, "audit", "r", "--out", "a", "--with-private-logs", "--data", "data")
    report = json.loads((root / "a" / "report.json").read_text())
    assert not [check["name"] for check in report["checks"] if check["level"] == "fail"]
    assert report["canaries"]["pairs"] == 12
    assert all(pair["paper"]["rdp"] <= pair["exact"]["rdp"] * (1 + 1e-9) for pair in report["pairs"])
    netdp(root, "audit", "r", "--out", "e", "--threat-model", "eavesdropper")
    assert json.loads((root / "e" / "report.json").read_text())["threat_model"]["name"] == "eavesdropper"
