"""A personalized-CD agent killed mid-run and restarted on its log folder, one process per agent on loopback.

Five agents of the paper's synthetic task, 5 updates each at a published budget ε̄ = 4; agent 2 runs
under its own lower budget (`--budget 3`) and is SIGKILLed as its update 2 starts. Started again
with a larger budget (above the one it ran with, or above the published one) it is refused with
exit code 2 and its logs stay byte for byte as they were; started again with the same budget and
`--resume` it rejoins: it finishes its remaining updates, appending to its logs. Its spends compose
within its own budget, the audit (private logs and data included) passes every check holding it to
that budget, and the other agents finished.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from coordinator_tools.audit.run_audit import AuditOptions, audit_run
from coordinator_tools.cluster.demo_protocols import loopback_addresses
from coordinator_tools.cluster.launch import LaunchOptions, node_command, node_log_dir, run_cluster
from coordinator_tools.dataprep.personalized_task import generate_task, task_topology, write_task
from node.agent_budget import BudgetRequest
from node.budget import within
from node.data import node_data_file
from node.protocols.personalized_cd import PersonalizedCDParams
from node.topology import NetworkParams, save_topology
from node.viewlog import PRIVATE_LOG_NAME, VIEW_LOG_NAME, read_log

pytestmark = pytest.mark.cluster
N, P, UPDATES, EPSILON, DELTA = 5, 3, 5, 4.0, 1e-5
KILLED, KILLED_AT, OWN_EPSILON = 2, 2, 3.0
PARAMS = PersonalizedCDParams(dimension=P, mu=1.0, lipschitz=0.3, max_examples=100, updates=UPDATES,
                              epsilon=EPSILON, delta=DELTA, tick_rate=20.0)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run with agent KILLED killed at its update KILLED_AT; the others finished."""
    root = tmp_path_factory.mktemp("restart")
    task = generate_task(N, P, seed=0)
    topology = task_topology(task, PARAMS, run_id=root.name, addresses=loopback_addresses(N),
                             network=NetworkParams(round_deadline_s=2.0, startup_deadline_s=60.0))
    save_topology(topology, root / "topology.json")
    write_task(task, root / "data")
    options = LaunchOptions(kill_at_round={KILLED: KILLED_AT}, budgets={KILLED: BudgetRequest(OWN_EPSILON)},
                            certs_dir=None)
    result = run_cluster(root / "topology.json", root / "data", root / "run", options)
    assert result.ok, [(r.node_id, r.exit_code, r.stderr_tail) for r in result.failures]
    assert [r.node_id for r in result.nodes if r.killed_by_request] == [KILLED]
    return root


def restart(root: Path, budget: float, *, resume: bool = True) -> subprocess.CompletedProcess[str]:
    """Agent KILLED's process started again by hand with its own budget `budget`."""
    options = LaunchOptions(budgets={KILLED: BudgetRequest(budget)})
    command = node_command(root / "run", KILLED, node_data_file(root / "data", KILLED), options, resume=resume)
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def logs(root: Path) -> tuple[bytes, bytes]:
    folder = node_log_dir(root / "run", KILLED)
    return (folder / VIEW_LOG_NAME).read_bytes(), (folder / PRIVATE_LOG_NAME).read_bytes()


def test_a_killed_agent_is_refused_a_larger_budget_then_resumes_and_stays_within_its_own(killed_run: Path) -> None:
    root = killed_run
    before = logs(root)
    spent_before = read_log(node_log_dir(root / "run", KILLED) / VIEW_LOG_NAME).of_kind("budget")
    assert [spend.step for spend in spent_before] == list(range(KILLED_AT))
    for larger, says in ((OWN_EPSILON + 0.5, "agent_budget"), (EPSILON + 1.0, "published budget")):
        refused = restart(root, larger)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
        assert logs(root) == before

    resumed = restart(root, OWN_EPSILON)
    assert resumed.returncode == 0, resumed.stderr
    assert f"done after {UPDATES} steps" in resumed.stderr
    after = logs(root)
    assert after[0].startswith(before[0]) and after[1].startswith(before[1])  # appended to, nothing rewritten
    contents = read_log(node_log_dir(root / "run", KILLED) / VIEW_LOG_NAME)
    assert contents.damage is None
    spends = contents.of_kind("budget")
    assert [spend.step for spend in spends] == list(range(UPDATES))
    assert within([spend.epsilon for spend in spends], OWN_EPSILON, DELTA)

    report = audit_run(root / "run", root / "audit", AuditOptions(data=root / "data", with_private_logs=True,
                                                                  attack_pairs="none"))
    assert all(check["ok"] for check in report["checks"]), report["checks"]
    agents = report["personalized"]["agents"]
    assert [agent["updates"] for agent in agents] == [UPDATES] * N
    assert agents[KILLED]["budget"]["epsilon"] == OWN_EPSILON and agents[KILLED]["within_budget"]
    assert all(agent["budget"]["epsilon"] == EPSILON for v, agent in enumerate(agents) if v != KILLED)
