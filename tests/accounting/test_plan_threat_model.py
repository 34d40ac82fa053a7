"""`netdp plan --threat-model` and `--colluders`, as `netdp audit` takes them: a DECOR ring planned per threat model.

On the 4-node ring with one round of DECOR (σ = σ_cor = 1), an eavesdropper sees y = x + η + C v, a
Gaussian of covariance I + L with L the ring's Laplacian, so its loss for u is (I + L)⁻¹_uu for
every u (the circulant's eigenvalues 1, 3, 3, 5: (1/4)(1 + 1/3 + 1/3 + 1/5) = 7/15); a curious node's neighbour
hides behind its other edge's draw only: p = 1/2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coordinator_tools import api
from coordinator_tools.audit.pairs_file import pair_matrix, read_pairs
from node.errors import ConfigError
from node.topology import Topology
from tests.accounting.plan_cli import run_plan


def decor_ring() -> Topology:
    return api.topology("ring", 4, protocol="decor", sigma=1.0, sigma_cor_ratio=1.0, rounds=1, dimension=1,
                        alpha=2.0, sensitivity=1.0, run_id="plan-threat")


def planned_rdp(tmp_path: Path) -> np.ndarray:
    """The plan's exact RDP per pair [u, v] (α = 2, Δ = σ = 1: exactly p)."""
    return pair_matrix(read_pairs(tmp_path / "plan-pairs.parquet"), "exact_rdp_upper", 4)


def test_plan_takes_the_eavesdropper_and_writes_it_into_the_plan(tmp_path: Path) -> None:
    code, document = run_plan(tmp_path, decor_ring(), "--threat-model", "eavesdropper")
    assert code == 0 and document["threat_model"]["name"] == "eavesdropper"
    off = ~np.eye(4, dtype=bool)
    np.testing.assert_allclose(planned_rdp(tmp_path)[off], 7 / 15, rtol=1e-9)


def test_plan_defaults_to_the_curious_observer_and_takes_colluders_beside_it(tmp_path: Path) -> None:
    code, document = run_plan(tmp_path, decor_ring(), "--colluders", "1,3")
    assert code == 0 and document["threat_model"]["name"] == "curious-observer"
    assert planned_rdp(tmp_path)[1, 0] == pytest.approx(1 / 2)
    assert document["collusion"]["colluders"] == [1, 3]
    (row,) = [loss for loss in document["collusion"]["losses"] if loss["source"] == 0]
    assert row["exact_rdp_upper"] == pytest.approx(1.0)  # nodes 1 and 3 hold both of node 0's edge draws


@pytest.mark.parametrize(("topology", "argv", "message"), [
    (decor_ring(), ("--threat-model", "eavesdropper", "--colluders", "1,2"), "two threat models; choose one"),
    (api.topology("ring", 4, protocol="muffliato", sigma=1.0, rounds=1, dimension=1, alpha=2.0, run_id="m"),
     ("--threat-model", "eavesdropper"), "--threat-model eavesdropper is not supported for protocol muffliato"),
])
def test_plan_refuses_a_threat_model_it_cannot_account(tmp_path: Path, topology: Topology, argv: tuple[str, ...],
                                                       message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run_plan(tmp_path, topology, *argv)
