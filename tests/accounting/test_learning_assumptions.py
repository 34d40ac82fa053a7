"""What a learning run's exact column assumes: hand cases where the linearized value is neither bound.

`linearized` holds every other node's gradient fixed. A run does not: each gradient is taken at a
model that carries earlier noise. With affine gradients g_x(θ) = h_x θ − a_x (quadratic losses, no
clipping) the run is an affine map of (data, noise), so its true divergence is computed here by an
independent route: every value simulated as a row on [a, z] with numpy, and μ² = the squared norm
of a_u's column against the noise the observer does not know (its own data and noise known). At
α = 2 and σ = Δ = 1 an RDP is μ², so the hand values read directly:

| case | setting | linearized | true | exact (c steps) |
|---|---|---|---|---|
| T1 | path v=0 – u=1 – w=2, T = 2, K = 1, step 1/L (η h = 1) | 19/10 | 2 (η h = 1/2: 73/37) | 2 |
| T2 | the same run, 0 → 2 (distance 2) | 1/10 | 0 (η h = 1/2: 1/37) | 1 |
| T3 | walk [v, w, u, v], v = 0, w = 1, u = 2, step 1/L | 1/2 | 1 | 1 |
| T4 | 2 nodes, T = 3 | 3 | 3 | 3 |

T1: v hears u at both steps, η(a_u − z_u^0) and (1 − η)θ_u^1 + η(a_u − z_u^1) with θ_u^1 = (θ_0 + θ_1 +
θ_2)/3 after step 0, so two readings of a_u: a_u − z_u^0 and a_u − z_u^1 − ((1 − η)/3) z_w^0, μ² =
1 + 1/(1 + (1 − η)²/9); holding the gradients fixed drops the (1 − η): 1 + 9/10. T2: w's step at η = 1
erases u's share of its model (0), the linearized model keeps it, (1/9)/(1 + 1/9). T3: v receives
θ' = c_u(c_w θ_v + γ a_w − γ z_w) + γ(a_u − z_u), c_x = 1 − γ h_x, μ² = 1/(1 + c_u²); the linearized
model 1/2. T4: v hears every step of u, the full view, where the linearized value is the worst case.
The exact column, c_{u,v} Δ²/σ², is at least the truth in every case (T1 reaches it).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from coordinator_tools.audit.checks import loss_checks
from coordinator_tools.audit.losses import PairwiseLosses
from coordinator_tools.audit.protocols.muffliato.transcript import planned_transcript
from coordinator_tools.audit.protocols.muffliato_gd.accountant import account, learning_schedule, linearized_run
from coordinator_tools.audit.protocols.rw_sgd.accountant import account as account_walk
from coordinator_tools.audit.protocols.token_sum.run import path_run
from coordinator_tools.audit.reachable import LINEARIZED_SENTENCE
from coordinator_tools.audit.report import build_report
from coordinator_tools.topology.build import build_topology
from node.protocols.muffliato_gd import MuffliatoGDParams
from node.protocols.rw_sgd import RwSgdParams
from node.topology import Topology

ACCOUNTING = {"sigma": 1.0, "sensitivity": 1.0, "alpha": 2.0, "delta": 1e-5}  # an RDP is μ²


def gd_topology(n: int, steps: int, *, learning_rate: float = 1.0, regularization: float = 0.0) -> Topology:
    """Muffliato-GD on the path 0 – 1 – … – n−1 (Metropolis weights: node 1 of the 3-path mixes 1/3 each), K = 1."""
    params = MuffliatoGDParams(sigma=1.0, sensitivity=1.0, alpha=2.0, dimension=1, task="least_squares", steps=steps,
                               gossip_rounds=1, learning_rate=learning_rate, clip=0.5, adjacency="dataset",
                               regularization=regularization)
    return build_topology(nx.path_graph(n), graph_name="path", run_id="assumptions", protocol=params)


def gd_losses(topology: Topology) -> PairwiseLosses:
    return account(planned_transcript(topology, rounds_per_step=1), **ACCOUNTING)


def mixing_matrix(topology: Topology) -> np.ndarray:
    weights = np.zeros((topology.n, topology.n))
    for v in range(topology.n):
        for w, weight in topology.weight_row_at(v, 0).items():
            weights[v, w] = weight
    return weights


def gossip_view(weights: np.ndarray, steps: int, eta: float, observer: int) -> np.ndarray:
    """The rows on [a_0..a_{n−1}, z_x^s (column n + x·T + s)] of every model `observer` receives in Muffliato-GD with
    K = 1, every node's gradient θ − a_x (h = 1) plus its draw, step η: θ^{t,0} = θ^t − η(θ^t − a + z^t)."""
    n = len(weights)
    theta = np.zeros((n, n + n * steps))
    rows = []
    for t in range(steps):
        gradient = theta.copy()
        gradient[range(n), range(n)] -= 1.0
        gradient[range(n), n + np.arange(n) * steps + t] += 1.0
        sent = theta - eta * gradient
        rows += [sent[w].copy() for w in range(n) if w != observer and weights[observer, w] != 0]
        theta = weights @ sent
    return np.array(rows)


def true_mu2(rows: np.ndarray, source: int, hidden: list[int]) -> float:
    """μ² of a_source's shift by Δ = 1 against the hidden noise columns (σ = 1): ‖N⁺ r‖² for r in range(N)."""
    noise = rows[:, hidden]
    left, singular, _ = np.linalg.svd(noise, full_matrices=False)
    kept = singular > 1e-10 * singular[0]
    coefficients = (left[:, kept].T @ rows[:, source]) / singular[kept]
    assert np.allclose(left[:, kept] @ (left[:, kept].T @ rows[:, source]), rows[:, source])  # in the noise's range
    return float(coefficients @ coefficients)


def hidden_noise(n: int, steps: int, observer: int) -> list[int]:
    return [n + x * steps + s for x in range(n) if x != observer for s in range(steps)]


@pytest.mark.parametrize("eta, true_value", [(1.0, 2.0), (0.5, 73 / 37)])
def test_t1_a_neighbour_learns_more_than_the_linearized_value_and_exact_bounds_it(eta: float,
                                                                                  true_value: float) -> None:
    topology = gd_topology(3, 2)
    rows = gossip_view(mixing_matrix(topology), 2, eta, observer=0)
    truth = true_mu2(rows, 1, hidden_noise(3, 2, 0))
    assert truth == pytest.approx(true_value, rel=1e-12)
    losses = gd_losses(topology)
    linearized = losses.columns["linearized"]
    assert linearized.rdp_upper[1, 0] == pytest.approx(1.9, rel=1e-9)
    assert linearized.rdp[1, 0] == pytest.approx(1.9, rel=1e-9)
    assert linearized.rdp_upper[1, 0] < truth  # the linearized value is no upper bound
    assert losses.exact_rdp[1, 0] == pytest.approx(2.0, rel=1e-12) and truth <= losses.exact_rdp[1, 0] * (1 + 1e-12)
    assert np.isnan(losses.exact_rdp_lower[1, 0]) and not losses.reconstructable[1, 0]


@pytest.mark.parametrize("eta, true_value", [(1.0, 0.0), (0.5, 1 / 37)])
def test_t2_a_node_two_hops_away_learns_less_than_the_linearized_value(eta: float, true_value: float) -> None:
    topology = gd_topology(3, 2)
    rows = gossip_view(mixing_matrix(topology), 2, eta, observer=2)
    truth = true_mu2(rows, 0, hidden_noise(3, 2, 2))
    assert truth == pytest.approx(true_value, abs=1e-12)
    losses = gd_losses(topology)
    assert losses.columns["linearized"].rdp_upper[0, 2] == pytest.approx(0.1, rel=1e-9)
    assert losses.columns["linearized"].rdp_upper[0, 2] > truth  # nor a lower bound
    assert losses.exact_rdp[0, 2] == pytest.approx(1.0, rel=1e-12)  # only u's step 0 reaches node 2
    assert truth <= losses.exact_rdp[0, 2]


@pytest.mark.parametrize("gamma_h, true_value", [(1.0, 1.0), (0.5, 4 / 5)])
def test_t3_a_walk_reveals_more_than_the_linearized_value_and_exact_bounds_it(gamma_h: float,
                                                                              true_value: float) -> None:
    """Walk [0, 1, 2, 0], one contribution of u = 2 that reaches v = 0: θ' = (1 − γh)θ + γ(a_x − z) at every hop
    (γ = 1; w's curvature 1/2 changes nothing, u's sets c_u = 1 − γh). At γh = 1 the last step sets the model to
    a_u − z_u whatever came before, so v reads u's noisy gradient (μ² = 1)."""
    curvature, path, n = [0.3, 0.5, gamma_h], [0, 1, 2, 0], 3
    theta = np.zeros(n + len(path) - 1)  # the token's model on [a_0..a_2, z_hop]
    for hop, holder in enumerate(path[:-1]):
        gradient = curvature[holder] * theta
        gradient[holder] -= 1.0
        gradient[n + hop] += 1.0
        theta = theta - gradient
    truth = true_mu2(theta[None, :], 2, [n + 1, n + 2])  # v drew hop 0's noise itself
    assert truth == pytest.approx(true_value, rel=1e-12)
    params = RwSgdParams(sigma=1.0, sensitivity=1.0, alpha=2.0, dimension=1, task="least_squares", steps=len(path),
                         learning_rate=1.0, clip=0.5, adjacency="dataset", sender="known")
    topology = build_topology(nx.complete_graph(n), graph_name="triangle", run_id="assumptions", protocol=params)
    losses = account_walk(path_run(topology, path), **ACCOUNTING)
    assert losses.columns["linearized"].rdp_upper[2, 0] == pytest.approx(0.5, rel=1e-9)
    assert losses.columns["linearized"].rdp_upper[2, 0] < truth
    assert losses.exact_rdp[2, 0] == pytest.approx(1.0, rel=1e-12) and truth <= losses.exact_rdp[2, 0] * (1 + 1e-12)
    assert losses.columns["realized_path"].rdp[2, 0] == pytest.approx(1.0)  # amplification by iteration: tight here


def test_t4_two_nodes_see_everything_and_every_column_agrees() -> None:
    topology = gd_topology(2, 3)
    rows = gossip_view(mixing_matrix(topology), 3, 1.0, observer=0)
    assert true_mu2(rows, 1, hidden_noise(2, 3, 0)) == pytest.approx(3.0, rel=1e-12)
    losses = gd_losses(topology)
    assert losses.columns["linearized"].rdp_upper[1, 0] == pytest.approx(3.0, rel=1e-9)
    assert losses.exact_rdp[1, 0] == pytest.approx(3.0, rel=1e-12) == losses.ldp_pairs("rdp")[1, 0]


def test_the_report_states_the_theorem_and_names_the_linearized_column() -> None:
    """The assumptions block, the page's line for `linearized`, and no undercount warning against a bound: the paper
    bound below exact is a plain statement (exact is an upper bound)."""
    topology = gd_topology(3, 2)
    losses = gd_losses(topology)
    run = planned_transcript(topology, rounds_per_step=1)
    document = build_report(losses, run, checks=loss_checks(losses)).document
    assumptions = document["assumptions"]
    assert "reachable-step composition" in assumptions["exact"]["theorem"]
    assert len(assumptions["exact"]["conditions"]) == 4 and "fixed input" in assumptions["linearized"]["definition"]
    assert document["column_definitions"]["linearized"].startswith(LINEARIZED_SENTENCE)
    pair = next(p for p in document["pairs"] if (p["source"], p["observer"]) == (1, 0))
    assert pair["exact"]["rdp"] == pytest.approx(2.0, rel=1e-12) and pair["exact"]["rdp_lower"] is None
    assert pair["linearized"]["rdp_upper"] == pytest.approx(1.9)
    line = next(check for check in document["checks"] if check["name"].startswith("paper bound"))
    assert line["name"] == "paper bound vs exact (a proven upper bound)" and line["level"] == "pass"
    assert document["summary"]["paper_undercounts"]["exact_is_bound"] is True


def test_the_regulariser_damps_the_rows() -> None:
    """λθ is added after clipping: θ_1^{1,0} = (1 − ηλ) θ_1^1 − η(g_1^1 + z_1^1), θ_1^1 = Σ_x W_1x θ_x^{0,0},
    θ_x^{0,0} = −η(g_x^0 + z_x^0). With η = 1/2, λ = 2/5: coefficient −(4/5)(1/3)(1/2) = −2/15 on every step-0
    column and −1/2 on (1, 1). With λ = 1/η every message is a fresh noisy gradient: the neighbour's linearized value
    is T = 2 (without the damping the unroll gave 1.9)."""
    topology = gd_topology(3, 2, learning_rate=0.5, regularization=0.4)
    transcript = planned_transcript(topology, rounds_per_step=1)
    run = linearized_run(transcript, learning_schedule(transcript))
    row = run.rows[run.messages.index((1, 0, 1))].reshape(3, 2)
    np.testing.assert_allclose(row, [[-2 / 15, 0.0], [-2 / 15, -0.5], [-2 / 15, 0.0]], rtol=1e-12)
    erased = gd_losses(gd_topology(3, 2, learning_rate=0.5, regularization=2.0))
    assert erased.columns["linearized"].rdp_upper[1, 0] == pytest.approx(2.0, rel=1e-9)
    assert gd_losses(gd_topology(3, 2)).columns["linearized"].rdp_upper[1, 0] == pytest.approx(1.9, rel=1e-9)
