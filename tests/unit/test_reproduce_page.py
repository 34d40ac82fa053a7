"""The reproduction page lists the statement-against-proof cases its runs' audits hold (ring-histogram, rw-sgd)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_tools.reproduce import page


def _report(folder: Path, report: dict[str, object]) -> None:
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps(report))


def test_the_audits_statement_and_proof_values_are_listed_once_per_distinct_pair(tmp_path: Path) -> None:
    histogram = {"protocol": "ring-histogram", "alpha": 2.0,
                 "token_walk": {"paper": {"eps": 3.5, "stated": {"eps": 1.25, "why_not_used": "swapped"}}}}
    _report(tmp_path / "a" / "audit", histogram)
    _report(tmp_path / "b" / "audit", histogram)
    _report(tmp_path / "c" / "audit", {"protocol": "rw-sgd", "alpha": 8.0, "rw_sgd": {"theorem3": {
        "order_valid": False, "noise_multiplier": 3.0, "largest_valid_order": 2.62}}})
    _report(tmp_path / "d" / "audit", {"protocol": "ring-sum", "alpha": 2.0, "token_walk": {"paper": {"eps": 1.0}}})
    runs = ["a/run", "a/audit", "b/audit", "c/audit", "d/audit", "missing/audit"]
    ring, walk = page.audit_statements(tmp_path, runs)
    assert (ring.statement_value, ring.proof_value, ring.why) == (1.25, 3.5, "swapped")
    assert ring.theorem.startswith("PAbD Thm 2") and ring.theorem.endswith("(2 audits)")
    assert (walk.statement_value, walk.proof_value) == (8.0, pytest.approx(2.62))
    assert walk.theorem.endswith("noise multiplier 3 (1 audit)") and "paper rdp is null" in walk.why
    html = page._statements([entry.model_dump() for entry in (ring, walk)])
    assert "1.25" in html and "3.5" in html and "2.62" in html
