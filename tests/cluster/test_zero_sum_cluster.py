"""Zero-sum averaging on real processes over gRPC with mutual TLS: a value per receiver, the mean kept, a clean audit.

Starts real node processes: run it through the cluster lock on shared machines.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from node.codec import from_tensor
from node.message import GOSSIP, kind_of
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log
from tests.cluster.netdp_cli import mutual_tls_run, netdp

pytestmark = pytest.mark.cluster


def test_a_mutual_tls_run_sends_each_neighbour_its_own_value_keeps_the_mean_and_audits_clean(tmp_path: Path) -> None:
    published = mutual_tls_run(tmp_path, "ring", "--n", "4", "--protocol", "zero-sum", "--sigma", "0.5", "--rounds",
                               "3", "--round-deadline", "3")
    protocol = published["protocol"]
    assert isinstance(protocol, dict)
    length = protocol["dimension"] + 16
    inputs, outputs = np.zeros(length), np.zeros(length)
    for v in range(4):
        node_dir = tmp_path / "r" / f"node-{v}"
        inputs += from_tensor(read_log(node_dir / PRIVATE_LOG_NAME).of_kind("private_input")[0].value)
        view = read_log(node_dir / VIEW_LOG_NAME)
        outputs += from_tensor(view.of_kind("final_output")[0].value)
        sent = [record for record in view.of_kind("sent") if kind_of(record) == GOSSIP]
        assert len(sent) == 2 * 3 and all(record.delivered for record in sent)
        for t in range(3):
            first, second = (from_tensor(record.payload) for record in sent if record.round == t)
            assert np.min(np.abs(first - second)) > 0  # each neighbour got its own value
    np.testing.assert_allclose(outputs, inputs, rtol=0, atol=1e-12)  # the shares cancel in the network's sum
    netdp(tmp_path, "audit", "r", "--out", "a", "--with-private-logs")
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert not [check["name"] for check in report["checks"] if check["level"] == "fail"]
    assert report["canaries"]["pairs"] == 12
    netdp(tmp_path, "audit", "r", "--out", "e", "--threat-model", "eavesdropper")
    eavesdropper = json.loads((tmp_path / "e" / "report.json").read_text())
    assert eavesdropper["threat_model"]["name"] == "eavesdropper"
    assert not [check["name"] for check in eavesdropper["checks"] if check["level"] == "fail"]
