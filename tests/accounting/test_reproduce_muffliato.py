"""`netdp reproduce muffliato-fig1a` and `muffliato-fig1bc` at quick scale, against numbers worked out here.

Fig. 1a's hypercube side is recomputed from scratch with numpy: the 5-cube's Metropolis matrix
(every weight 1/6), the accelerated recursion x^1 = W x^0, x^{t+1} = (1 - ω) x^{t-1} + ω W x^t
(ω from W's spectral gap, Muffliato Alg. 1), observer v's view the rows of its neighbours'
values in rounds 0..T-1 with its own input and noise known. At σ = Δ = 1 and α = 2 a pair's
exact RDP is a_uᵀ (A Aᵀ)⁺ a_u (a_u: u's column of the view) and Thm 1 is
Σ_{w ~ v} Σ_t (W^t)²_{u,w} / ‖(W^t)_w‖².
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.cli import main
from coordinator_tools.reproduce.muffliato_fig1bc import EXACT, LINEARIZED, UNDER_LINEARIZED
from tests.accounting.reference import gaussian_eps

N, DIMENSIONS = 32, 5  # the quick scale's hypercube


def _reproduce(name: str, out: Path, seed: int) -> dict:
    assert main(["reproduce", name, "--scale", "quick", "--out", str(out), "--seed", str(seed)]) == 0
    return json.loads((out / "result.json").read_text())


def _hypercube_losses(rounds: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Thm 1, exact, hop distance) for every ordered pair of the 5-cube after `rounds` accelerated rounds."""
    w = np.zeros((N, N))
    for i in range(N):
        for k in range(DIMENSIONS):
            w[i, i ^ (1 << k)] = 1 / (1 + DIMENSIONS)
        w[i, i] = 1 - w[i].sum()
    eigenvalues = np.sort(np.linalg.eigvalsh(w))
    gap = 1 - max(abs(eigenvalues[-2]), abs(eigenvalues[0]))
    omega = 2 * (1 - math.sqrt(gap * (1 - gap / 4))) / (1 - gap / 2) ** 2
    sent = [np.eye(N), w]
    while len(sent) < rounds:
        sent.append((1 - omega) * sent[-2] + omega * w @ sent[-1])
    plain = [np.linalg.matrix_power(w, t) for t in range(rounds)]
    paper, exact, hops = (np.full((N, N), np.nan) for _ in range(3))
    for v in range(N):
        neighbours = [v ^ (1 << k) for k in range(DIMENSIONS)]
        view = np.delete(np.vstack([sent[t][neighbours] for t in range(rounds)]), v, axis=1)
        information = np.linalg.pinv(view @ view.T, rcond=1e-10, hermitian=True)
        for u in range(N):
            if u == v:
                continue
            column = view[:, u - (u > v)]
            exact[u, v] = column @ information @ column
            paper[u, v] = sum(plain[t][x, u] ** 2 / (plain[t][x] @ plain[t][x])
                              for t in range(rounds) for x in neighbours)
            hops[u, v] = bin(u ^ v).count("1")
    return paper, exact, hops


def test_fig1a_quick_puts_the_hypercube_losses_computed_here_beside_the_ldp_line(tmp_path: Path) -> None:
    document = _reproduce("muffliato-fig1a", tmp_path / "fig1a", seed=11)
    rows = {row["quantity"]: row for row in document["rows"]}
    assert document["setup"]["n"] == N
    paper, exact, hops = _hypercube_losses(document["setup"]["hypercube"]["rounds"])
    for hop in range(1, DIMENSIONS + 1):
        at = hops == hop
        assert rows[f"hypercube, hop {hop}: Thm 1 bound, mean over pairs"]["measured"] == pytest.approx(
            paper[at].mean(), rel=1e-9)
        assert rows[f"hypercube, hop {hop}: exact, mean over pairs"]["measured"] == pytest.approx(
            exact[at].mean(), rel=1e-6)
    off = ~np.isnan(exact)
    assert rows["hypercube: pairs amplified over LDP (exact < LDP)"]["measured"] == pytest.approx(
        np.mean(exact[off] < 1 - 1e-6))
    assert rows["hypercube: pairs where Thm 1 undercounts the exact loss"]["measured"] == pytest.approx(
        np.mean(paper[off] < exact[off] * (1 - 1e-6)))
    assert rows["hypercube: Thm 1 bound vs hop distance (Spearman)"]["measured"] == pytest.approx(-1.0)
    assert rows["hypercube: Thm 1 bound vs hop distance (Spearman)"]["verdict"] == "reproduced"
    # Thm 1 below the exact loss on the paper's own graph and rounds is a finding, and so is a far observer that
    # reconstructs the noisy input (its exact loss is the LDP loss, 1)
    assert np.mean(paper[off] < exact[off] * (1 - 1e-6)) > 0
    assert rows["hypercube: pairs where Thm 1 undercounts the exact loss"]["verdict"] == "finding"
    reconstructs = rows["hypercube: pairs beyond hop 1 whose observer reconstructs the source's noisy input"]
    far = off & (hops > 1)
    assert reconstructs["verdict"] == "finding" and 0 < reconstructs["measured"] <= np.mean(exact[far] > 1 - 1e-6)
    assert document["verdict"] == "finding" and {d["aspect"] for d in document["deviations"]} >= {"n", "clipping"}
    # the LDP line: alpha Delta^2 / (2 sigma^2) = 1 at the paper code's parameters, published and measured
    for graph in ("hypercube", "erdos_renyi"):
        ldp = rows[f"{graph}: local DP loss"]
        assert ldp["published"] == 1.0 and ldp["measured"] == pytest.approx(1.0) and ldp["agrees"] is True
    er_exact = [row["measured"] for name, row in rows.items() if name.startswith("erdos_renyi, hop")
                and "exact" in name]
    assert er_exact and all(0 < value <= 1 + 1e-9 for value in er_exact)
    assert document["figures"] == ["fig1a_loss_vs_hops.png"]
    assert all((tmp_path / "fig1a" / run).is_dir() for run in document["runs"])
    assert set(document["seeds"]) >= {"hypercube_noise", "erdos_renyi_graph"}


def test_fig1bc_quick_sets_graphs_drawn_per_step_beside_a_fixed_graph_and_a_trusted_aggregator(tmp_path: Path) -> None:
    document = _reproduce("muffliato-fig1bc", tmp_path / "fig1bc", seed=3)
    rows = {row["quantity"]: row["measured"] for row in document["rows"]}
    setup = document["setup"]
    assert all(math.isfinite(value) for value in rows.values())
    assert all(row["published"] is None for row in document["rows"])  # Fig. 1c prints curves, no numbers
    # local DP: T noisy gradients seen directly, each a Gaussian release of sensitivity Delta at sigma
    mu = math.sqrt(setup["steps"]) * setup["sensitivity"] / setup["sigma"]
    assert rows["local DP eps"] == pytest.approx(gaussian_eps(mu, setup["delta"]), rel=1e-6)
    assert setup["edge_probability"] == pytest.approx(math.log(setup["n"]) / setup["n"])
    # Fig. 1c's shape is measured on the paper's fixed-gradient model (linearized), the proven bound beside it
    for label in (LINEARIZED, EXACT):
        mean = rows[f"graphs drawn per step: mean pairwise eps, {label}"]
        assert 0 < rows["central DP eps"] < mean <= rows["local DP eps"] * (1 + 1e-9)
        assert 0 < rows[f"graphs drawn per step: worst pair eps / LDP eps, {label}"] <= 1 + 1e-9
    assert 0 <= rows[UNDER_LINEARIZED] <= 1
    verdicts = {row["quantity"]: row["verdict"] for row in document["rows"]}
    assert verdicts[UNDER_LINEARIZED] == ("finding" if rows[UNDER_LINEARIZED] > 0 else "reproduced")
    assert {d["aspect"] for d in document["deviations"]} >= {"dataset", "n", "rounds", "clipping"}
    [clipping] = [d for d in document["deviations"] if d["aspect"] == "clipping"]
    assert "not differentially private" in clipping["paper"] and "before the noise" in clipping["netdp"]
    accuracies = [rows[f"final test accuracy: {who}"] for who in ("Muffliato-GD (netdp run)", "trusted aggregator",
                                                                   "local DP")]
    assert all(0 <= value <= 1 for value in accuracies)
    assert rows["final accuracy, netdp run minus trusted aggregator"] == pytest.approx(accuracies[0] - accuracies[1])
    assert document["figures"] == ["fig1c_schedules_and_utility.png"]
    assert set(document["seeds"]) == {"schedule", "data", "noise"}


def test_an_interrupted_fig1a_resumes_keeping_the_finished_graph(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fig1a"
    first = _reproduce("muffliato-fig1a", out, seed=2)
    kept = (out / "hypercube" / "audit" / "report.json").stat().st_mtime_ns
    # interrupted during the second graph's audit: its page (written last) and the result are missing
    (out / "erdos_renyi" / "audit" / "index.html").unlink()
    (out / "result.json").unlink()
    assert main(["reproduce", "muffliato-fig1a", "--scale", "quick", "--out", str(out), "--seed", "2"]) != 0
    assert "--resume" in capsys.readouterr().err.replace("\n", " ")
    assert main(["reproduce", "muffliato-fig1a", "--scale", "quick", "--out", str(out), "--seed", "3", "--resume"]) != 0
    assert "same name, scale and seed" in " ".join(capsys.readouterr().err.split())
    assert main(["reproduce", "muffliato-fig1a", "--scale", "quick", "--out", str(out), "--resume"]) == 0
    resumed = json.loads((out / "result.json").read_text())
    assert (out / "hypercube" / "audit" / "report.json").stat().st_mtime_ns == kept
    assert (out / "erdos_renyi" / "audit" / "index.html").exists() and resumed["seed"] == 2
    assert [(row["quantity"], row["measured"]) for row in resumed["rows"]] == \
        [(row["quantity"], row["measured"]) for row in first["rows"]]
