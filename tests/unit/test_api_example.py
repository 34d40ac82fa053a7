"""examples/notebook_api.py runs end to end through coordinator_tools.api, and its tables say what the run did."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "notebook_api.py"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The example's globals after running it as a script in a fresh working directory."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("example"))
        return runpy.run_path(str(EXAMPLE), run_name="__main__")


def test_the_run_finishes_and_estimates_the_mean_within_thm2(example: dict[str, object]) -> None:
    run, topo = example["run"], example["topo"]
    assert run.ok
    assert run.estimates.shape == (topo.n, example["DIMENSION"])
    assert list(run.estimates.index) == list(range(topo.n))
    assert example["mse"] <= example["mse_bound"]  # Muffliato Thm 2: 3 sigma^2 / n per coordinate


def test_the_audit_tables_cover_every_pair_and_every_check_passes(example: dict[str, object]) -> None:
    audit, n = example["audit"], example["topo"].n
    assert audit.ok and audit.checks["ok"].all()
    pairs = audit.pairs
    assert len(pairs) == n * (n - 1)
    assert not (pairs["source"] == pairs["observer"]).any()
    assert (pairs["exact_eps_upper"] <= pairs["ldp_eps"] * (1 + 1e-9)).all()
    attacked = pairs["model_attack_eps_lower"].notna()
    assert attacked.all()  # n <= 32: the audit attacks every pair
    assert (pairs["model_attack_eps_lower"] <= pairs["exact_eps_upper"] * (1 + 1e-9)).all()
    assert example["worst_pairs"]["exact_eps_upper"].is_monotonic_decreasing
    assert example["eps_per_observer"].shape == (n, 3)
    observers = audit.observers
    assert observers.shape[0] == n
    np.testing.assert_allclose(observers["exact_upper"], audit.pairs.groupby("observer")["exact_rdp_upper"].sum() / n)
    assert {"exact_eps_upper", "paper_eps", "ldp_eps"} <= set(audit.summary.index)


def test_the_plan_matches_the_run_that_followed_it(example: dict[str, object]) -> None:
    planned, compared = example["planned"], example["plan_vs_run"]
    assert planned.ok and "T_stop" in planned.text
    assert len(compared) == len(example["audit"].pairs)
    np.testing.assert_allclose(compared["exact_eps_upper_planned"], compared["exact_eps_upper_run"], rtol=1e-9)
