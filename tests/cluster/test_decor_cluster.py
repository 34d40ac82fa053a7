"""DECOR on real node processes over gRPC with mutual TLS: the secrets are agreed on the wire, the run audits clean.

Starts real node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from node.codec import from_tensor
from node.pairwise_secrets import SECRET_PURPOSE, SECURE_MECHANISM
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.cluster.netdp_cli import mutual_tls_run, netdp

pytestmark = pytest.mark.cluster


def test_a_mutual_tls_run_agrees_its_secrets_on_the_wire_and_audits_clean(tmp_path: Path) -> None:
    mutual_tls_run(tmp_path, "ring", "--n", "4", "--protocol", "decor", "--sigma", "0.5", "--rounds", "3",
                   "--round-deadline", "3")
    agreed: dict[tuple[int, int], bytes] = {}
    for v in range(4):
        node_dir = tmp_path / "r" / f"node-{v}"
        view = (node_dir / VIEW_LOG_NAME).read_bytes()
        for draw in read_log(node_dir / PRIVATE_LOG_NAME).of_kind("noise"):
            if draw.purpose == SECRET_PURPOSE:
                assert draw.mechanism == SECURE_MECHANISM
                secret = bytes(from_tensor(draw.value).astype(np.uint8))
                assert secret not in view
                agreed[min(v, draw.step), max(v, draw.step)] = agreed.get((min(v, draw.step), max(v, draw.step)),
                                                                           secret)
                assert agreed[min(v, draw.step), max(v, draw.step)] == secret  # both ends hold the same secret
    assert sorted(agreed) == [(0, 1), (0, 3), (1, 2), (2, 3)] and len(set(agreed.values())) == 4
    netdp(tmp_path, "audit", "r", "--out", "a", "--with-private-logs", "--data", "data")
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert not [check["name"] for check in report["checks"] if check["level"] == "fail"]
    assert report["canaries"]["pairs"] == 12
    netdp(tmp_path, "audit", "r", "--out", "e", "--threat-model", "eavesdropper")
    assert json.loads((tmp_path / "e" / "report.json").read_text())["threat_model"]["name"] == "eavesdropper"
