"""The recommendation task (AISTATS 2018 Sec. 5.2): u.data read and checked, the split, ALS, the k-NN graph, files.

MovieLens itself is never shipped: these tests read small u.data files written here and the
synthetic ratings shipped in the package, which `netdp data synthetic-ratings` makes again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.audit.protocols.personalized_cd.simulate import (
    accuracies,
    local_model,
    simulate_cd,
)
from coordinator_tools.cli import main
from coordinator_tools.dataprep.learning_data import node_train_file
from coordinator_tools.dataprep.personalized_task import INFO_FILE, load_test_sets, task_topology
from coordinator_tools.dataprep.ratings import (
    SHIPPED_RATINGS,
    Ratings,
    read_ratings,
    synthetic_ratings,
    write_ratings,
)
from coordinator_tools.dataprep.recommendation_task import (
    RecommendationInfo,
    als_features,
    knn_weights,
    make_task,
    split_ratings,
)
from node.errors import ConfigError
from node.personalized import AgentProblem
from node.protocols.personalized_cd import PersonalizedCDParams, load_agent_data
from node.schema import load_model

GOOD = "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n196\t377\t4.5\t881250950\n"


@pytest.fixture(scope="module")
def shipped() -> Ratings:
    return read_ratings(SHIPPED_RATINGS)


def test_a_u_data_file_reads_into_its_ratings(tmp_path: Path) -> None:
    path = tmp_path / "u.data"
    path.write_text(GOOD, encoding="utf-8")
    ratings = read_ratings(path)
    assert ratings.users.tolist() == [196, 186, 22, 196] and ratings.items.tolist() == [242, 302, 377, 377]
    assert ratings.values.tolist() == [3.0, 3.0, 1.0, 4.5]
    assert ratings.timestamps.tolist() == [881250949, 891717742, 878887116, 881250950]
    write_ratings(ratings, tmp_path / "again.data")
    assert (tmp_path / "again.data").read_text(encoding="utf-8") == GOOD


def test_the_shipped_ratings_are_what_the_generator_makes_from_its_defaults(shipped: Ratings, tmp_path: Path) -> None:
    made = synthetic_ratings()
    for name in ("users", "items", "values", "timestamps"):
        assert np.array_equal(getattr(shipped, name), getattr(made, name)), name
    assert main(["data", "synthetic-ratings", "--out", str(tmp_path / "u.data")]) == 0
    assert (tmp_path / "u.data").read_bytes() == SHIPPED_RATINGS.read_bytes()
    assert np.unique(shipped.users).size == 40 and np.unique(shipped.items).size <= 60
    assert set(np.unique(shipped.values)) <= {1.0, 2.0, 3.0, 4.0, 5.0}


def test_a_missing_ratings_file_is_a_one_line_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = tmp_path / "ml-100k" / "u.data"
    with pytest.raises(ConfigError, match="u.data: ratings file not found"):
        read_ratings(missing)
    assert main(["data", "recommendation", "--ratings", str(missing), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and str(missing) in error and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("line", "problem"), [
    ("196\t242\t3", "expected 4 tab-separated fields"),
    ("196 242 3 881250949", "expected 4 tab-separated fields"),
    ("196\t242\t3\t881250949\textra", "got 5"),
    ("0\t242\t3\t881250949", "user '0' is not an integer >= 1"),
    ("u196\t242\t3\t881250949", "user 'u196' is not an integer >= 1"),
    ("196\t-1\t3\t881250949", "item '-1' is not an integer >= 1"),
    ("196\t242\tnan\t881250949", "rating 'nan' is not a positive number"),
    ("196\t242\tthree\t881250949", "rating 'three' is not a positive number"),
    ("196\t242\t0\t881250949", "rating '0' is not a positive number"),
    ("196\t242\t3\t-5", "timestamp '-5' is not an integer >= 0"),
    ("196\t242\t4\t881250999", "user 196 already rated item 242 on line 1"),
])
def test_a_malformed_line_is_a_one_line_error_naming_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "u.data"
    path.write_text("196\t242\t3\t881250949\n186\t302\t3\t891717742\n" + line + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        read_ratings(path)
    assert str(error.value).startswith(f"{path}:3: ") and problem in str(error.value)
    assert "\n" not in str(error.value)


def test_an_empty_file_has_no_ratings(tmp_path: Path) -> None:
    (tmp_path / "u.data").write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="no ratings"):
        read_ratings(tmp_path / "u.data")


def test_every_user_keeps_a_fifth_of_its_ratings_for_testing_at_random_and_from_the_seed(shipped: Ratings) -> None:
    user_ids, split = split_ratings(shipped, None, np.random.default_rng(5))
    assert user_ids == sorted(np.unique(shipped.users).tolist())
    movies = np.unique(shipped.items)
    assert split.items == movies.size
    for user, (train_columns, train_values), (test_columns, test_values) in zip(user_ids, split.train, split.test):
        mine = shipped.users == user
        m = int(mine.sum())
        assert len(test_columns) == max(1, round(0.2 * m)) and len(train_columns) == m - len(test_columns)
        rated = dict(zip(shipped.items[mine].tolist(), shipped.values[mine].tolist()))
        seen = movies[np.concatenate([train_columns, test_columns])].tolist()
        assert sorted(seen) == sorted(rated)  # a partition of the user's ratings
        assert [rated[item] for item in movies[train_columns]] == train_values.tolist()
        assert [rated[item] for item in movies[test_columns]] == test_values.tolist()
    again = split_ratings(shipped, None, np.random.default_rng(5))[1]
    other = split_ratings(shipped, None, np.random.default_rng(6))[1]
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(split.test, again.test))
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(split.test, other.test))
    first = split_ratings(shipped, 12, np.random.default_rng(5))[0]
    assert first == user_ids[:12]
    with pytest.raises(ConfigError, match="--users must be 2..40"):
        split_ratings(shipped, 41, np.random.default_rng(5))


def test_a_user_with_a_single_rating_cannot_be_split(tmp_path: Path) -> None:
    path = tmp_path / "u.data"
    path.write_text("1\t1\t3\t0\n1\t2\t4\t0\n2\t1\t5\t0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="user 2 has 1 rating"):
        split_ratings(read_ratings(path), None, np.random.default_rng(0))


def test_als_recovers_a_fully_observed_low_rank_matrix() -> None:
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(30, 3)) @ rng.normal(size=(3, 25))
    rated = np.ones_like(matrix, dtype=bool)
    rated[0, :5] = False  # a few missing entries are simply not fitted
    phi = als_features(matrix, rated, 3, rng, regularization=1e-6, iterations=200)
    users = np.linalg.lstsq(phi, matrix.T, rcond=None)[0].T
    assert np.abs((users @ phi.T - matrix)[rated]).max() < 1e-3


def test_a_movie_nobody_rated_for_training_gets_zero_features() -> None:
    matrix = np.array([[4.0, 0.0, 2.0], [3.0, 0.0, 5.0]])
    phi = als_features(matrix, matrix != 0, 2, np.random.default_rng(0))
    assert np.array_equal(phi[1], np.zeros(2)) and np.abs(phi[[0, 2]]).sum() > 0


def test_the_knn_graph_joins_every_user_to_its_k_most_cosine_similar_and_nothing_else() -> None:
    rng = np.random.default_rng(3)
    matrix = np.where(rng.random((25, 40)) < 0.3, rng.integers(1, 6, (25, 40)), 0).astype(float)
    matrix[:, 0] = 3.0  # nobody without ratings
    k = 4
    weights = knn_weights(matrix, k)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    similarity = unit @ unit.T
    nearest = [set(np.argsort(-np.where(np.eye(25, dtype=bool)[i], -np.inf, similarity[i]), kind="stable")[:k])
               for i in range(25)]
    expected = {(min(i, j), max(i, j)) for i in range(25) for j in nearest[i]}
    assert set(weights) == expected and set(weights.values()) == {1.0}
    assert all(u < v for u, v in weights)  # each undirected edge once: W_ij = W_ji
    degrees = np.bincount(np.array(list(weights)).ravel(), minlength=25)
    assert degrees.min() >= k and degrees.sum() < 2 * k * 25  # at least k each; mutual neighbours make one edge
    with pytest.raises(ConfigError, match="--neighbours must be 1..24"):
        knn_weights(matrix, 25)


@pytest.fixture(scope="module")
def task(shipped: Ratings):
    return make_task(shipped, "shipped", features=4, seed=0)


def test_the_task_centres_each_users_ratings_and_publishes_a_smoothness_bound(task) -> None:
    info = task.info
    assert len(task.train) == len(task.test) == len(info.user_ids) == 40
    assert info.train_sizes == [len(share.y) for share in task.train]
    assert info.test_sizes == [len(share.y) for share in task.test]
    # max ‖φ_j‖² over the movies: every movie with a training rating is a row of some training set (the others are 0)
    assert info.smoothness == max(float(np.sum(share.x**2, axis=1).max()) for share in task.train)
    for share in task.train:
        assert share.x.shape[1] == 4 and abs(share.y.mean()) < 1e-9  # centred on the user's training mean
        hessian = share.x.T @ share.x / len(share.y)  # of the data term ½ mean (θᵀφ − r)²
        assert np.linalg.eigvalsh(hessian).max() <= info.smoothness * (1 + 1e-12)


def mean_rmse(models, tests) -> float:
    """The paper's per-user test RMSE, averaged over users."""
    return float(np.sqrt(accuracies(models, tests, "least_squares")).mean())


def test_non_private_cd_beats_purely_local_models_in_rmse_whatever_the_split(shipped: Ratings) -> None:
    """The qualitative result of the paper's Table 1 on the shipped ratings, for several split seeds."""
    for seed in range(3):
        task = make_task(shipped, "shipped", features=4, seed=seed)
        params = PersonalizedCDParams(dimension=4, task="least_squares", mu=0.3, lipschitz=1.0,
                                      smoothness=task.info.smoothness, max_examples=max(task.info.train_sizes),
                                      updates=10)
        topology = task_topology(task, params, run_id="rmse")
        problems = [AgentProblem.of(params, topology, agent, share) for agent, share in enumerate(task.train)]
        local = mean_rmse([local_model(problem) for problem in problems], task.test)
        cd = mean_rmse(simulate_cd(problems, params.updates, None, np.random.default_rng(0)), task.test)
        assert cd < local - 0.04, (seed, cd, local)


def test_data_recommendation_writes_files_the_nodes_and_the_auditor_read(tmp_path: Path, task) -> None:
    out = tmp_path / "task"
    assert main(["data", "recommendation", "--synthetic", "--seed", "0", "--out", str(out)]) == 0
    info = load_model(RecommendationInfo, out / INFO_FILE)
    assert info.model_copy(update={"ratings": "shipped"}) == task.info and info.ratings == str(SHIPPED_RATINGS)
    params = PersonalizedCDParams(dimension=4, task="least_squares", mu=1.0, max_examples=24, updates=3)
    for agent in (0, 39):
        share = load_agent_data(node_train_file(out, agent), params)
        assert np.array_equal(share.x, task.train[agent].x) and np.array_equal(share.y, task.train[agent].y)
    tests = load_test_sets(out, 4, "least_squares")
    assert all(np.array_equal(a.y, b.y) for a, b in zip(tests, task.test))
    edges = [line.split() for line in (out / "similarity.edges").read_text(encoding="utf-8").splitlines()[1:]]
    assert {(int(u), int(v)) for u, v, _ in edges} == set(task.weights)
    assert main(["data", "recommendation", "--synthetic", "--users", "12", "--neighbours", "4", "--features", "3",
                 "--seed", "1", "--out", str(tmp_path / "small")]) == 0
    small = load_model(RecommendationInfo, tmp_path / "small" / INFO_FILE)
    assert (len(small.user_ids), small.neighbours, small.features) == (12, 4, 3)
