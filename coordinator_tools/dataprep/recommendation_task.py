"""The AISTATS 2018 recommendation task (Sec. 5.2, supplementary D.2): every user an agent, rating movies.

From ratings in MovieLens `u.data` format (`coordinator_tools.dataprep.ratings`: a user's MovieLens-100K,
or the shipped synthetic set), as the paper does:
* every user is an agent (the first `users` user ids, in id order: agent i is `user_ids[i]`); its
  ratings are split at random, 80% for training and 20% (at least one) for testing;
* ratings are centred user-wise: the user's mean training rating is subtracted from its training
  and test ratings (predicting it back adds the mean, so the RMSE is the same on raw ratings);
* movie features φ_j ∈ R^p (p = 20 for MovieLens) come from alternating least squares with
  weighted-λ regularisation (Zhou et al. 2008) on the centred training ratings only; a movie with no
  training rating gets φ_j = 0 (its prediction is the user's mean). The paper notes that features
  should come from data independent of the training set and uses these for convenience; so do we.
* agent i's examples are (x, y) = (φ_j, r_ij − r̄_i) of its training ratings, quadratic loss
  (the protocol's least squares, ½(θᵀφ − r)²), so the data term's smoothness is at most
  max_j ‖φ_j‖²: task.json records it, to publish with --smoothness;
* W_ij = 1 when i is among the k = 10 nearest neighbours of j, or j of i, by cosine similarity of
  their raw training rating vectors (0 for an unrated movie), as in the paper; the graph must be
  connected. Published scaled to rows of at most 1, like the synthetic task (`personalized_task`).

Files: the synthetic task's (node-<id>.npz, test.npz with each row's agent, similarity.edges),
with task.json holding RecommendationInfo. `netdp data recommendation` writes them.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import networkx as nx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from coordinator_tools.dataprep.datasets import chosen_seed, output_folder
from coordinator_tools.dataprep.personalized_task import (
    EDGES_FILE,
    INFO_FILE,
    TEST_FILE,
    AgentTasks,
    write_task,
)
from coordinator_tools.dataprep.ratings import SHIPPED_RATINGS, Ratings, read_ratings
from node.errors import ConfigError
from node.learning import LocalData

TEST_FRACTION = 0.2
NEIGHBOURS = 10
MOVIELENS_FEATURES = 20  # the paper's p
SYNTHETIC_FEATURES = 4  # the shipped ratings come from 3 latent dimensions
ALS_REGULARIZATION = 0.1  # λ of ALS-WR: each row's ridge term is λ times its number of ratings
ALS_ITERATIONS = 20


class RecommendationInfo(BaseModel):
    """task.json of a recommendation task: where its ratings came from, how they were split and featurised."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ratings: str = Field(min_length=1, description="the ratings file read")
    user_ids: list[int] = Field(min_length=2, description="the file's user id of every agent")
    items: int = Field(ge=1, description="movies rated by these users (feature rows)")
    features: int = Field(ge=1, description="p: length of every movie's features and every agent's model")
    neighbours: int = Field(ge=1, description="k of the k-NN similarity graph")
    seed: int = Field(ge=0, description="seed of the split and of ALS's starting features")
    test_fraction: float = Field(gt=0.0, lt=1.0)
    als_regularization: float = Field(gt=0.0)
    als_iterations: int = Field(ge=1)
    train_sizes: list[int] = Field(description="m_i: training ratings of every agent")
    test_sizes: list[int]
    smoothness: float = Field(ge=0.0, description="max_j ‖φ_j‖²: bound on the smoothness of every data term")


@dataclasses.dataclass(frozen=True)
class RecommendationTask(AgentTasks):
    """The recommendation task in memory (the weights are all 1)."""

    info: RecommendationInfo


@dataclasses.dataclass(frozen=True)
class RatingSplit:
    """Every agent's training and test ratings as (movie column, rating) arrays, raw (not centred)."""

    items: int
    train: list[tuple[np.ndarray, np.ndarray]]
    test: list[tuple[np.ndarray, np.ndarray]]

    def train_matrix(self) -> np.ndarray:
        """Agents × movies, the training ratings, 0 where a movie is not rated for training."""
        matrix = np.zeros((len(self.train), self.items))
        for agent, (columns, values) in enumerate(self.train):
            matrix[agent, columns] = values
        return matrix


def split_ratings(ratings: Ratings, users: int | None, rng: np.random.Generator,
                  test_fraction: float = TEST_FRACTION) -> tuple[list[int], RatingSplit]:
    """The first `users` user ids (all by default) and their ratings split at random, per user.

    Each user keeps round(test_fraction m_i) ratings for testing, at least one, and the rest (at
    least one) for training; movies are the columns 0.. of the movies these users rated, in id order.
    """
    user_ids = np.unique(ratings.users)
    if users is not None:
        if not 2 <= users <= user_ids.size:
            raise ConfigError(f"--users must be 2..{user_ids.size} (the users in the ratings), not {users}")
        user_ids = user_ids[:users]
    kept = np.isin(ratings.users, user_ids)
    item_ids, columns = np.unique(ratings.items[kept], return_inverse=True)
    agents = np.searchsorted(user_ids, ratings.users[kept])
    values = ratings.values[kept]
    train, test = [], []
    for agent, user in enumerate(user_ids):
        rows = np.flatnonzero(agents == agent)
        if rows.size < 2:
            raise ConfigError(f"user {user} has {rows.size} rating: a user needs 2 or more to train and test")
        held = min(rows.size - 1, max(1, round(test_fraction * rows.size)))
        rows = rng.permutation(rows)
        test_rows, train_rows = np.sort(rows[:held]), np.sort(rows[held:])
        train.append((columns[train_rows], values[train_rows]))
        test.append((columns[test_rows], values[test_rows]))
    return user_ids.tolist(), RatingSplit(item_ids.size, train, test)


def als_features(matrix: np.ndarray, rated: np.ndarray, features: int, rng: np.random.Generator,
                 regularization: float = ALS_REGULARIZATION, iterations: int = ALS_ITERATIONS) -> np.ndarray:
    """Movie features (movies × p) of ALS-WR on the observed entries of `matrix` (rated: a boolean mask).

    Alternately every user's then every movie's factors solve their ridge problem
    min Σ_observed (r − uᵀv)² + λ n ‖·‖² exactly; a row with no rating stays 0.
    """
    movies = rng.normal(0.0, 0.1, (matrix.shape[1], features))
    observed = np.where(rated, matrix, 0.0)
    for _ in range(iterations):
        users = _ridge_rows(observed, rated, movies, regularization)
        movies = _ridge_rows(observed.T, rated.T, users, regularization)
    return movies


def _ridge_rows(observed: np.ndarray, rated: np.ndarray, factors: np.ndarray, regularization: float) -> np.ndarray:
    """For every row r: argmin_w Σ_{j rated} (r_j − wᵀf_j)² + λ n_r ‖w‖², all rows at once."""
    p = factors.shape[1]
    counts = rated.sum(axis=1)
    outer = (factors[:, :, None] * factors[:, None, :]).reshape(len(factors), p * p)
    grams = (rated.astype(float) @ outer).reshape(-1, p, p)
    grams += (regularization * counts + (counts == 0))[:, None, None] * np.eye(p)  # identity where nothing is rated
    return np.linalg.solve(grams, (observed @ factors)[:, :, None])[:, :, 0]


def knn_weights(matrix: np.ndarray, neighbours: int) -> dict[tuple[int, int], float]:
    """W_ij = 1 for every pair i < j where one is among the other's k most cosine-similar rows (ties: lower index)."""
    n = len(matrix)
    if not 1 <= neighbours < n:
        raise ConfigError(f"--neighbours must be 1..{n - 1} (other agents), not {neighbours}")
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :neighbours]
    edges = {(min(i, int(j)), max(i, int(j))) for i in range(n) for j in nearest[i]}
    return {edge: 1.0 for edge in sorted(edges)}


def make_task(ratings: Ratings, source: str, *, features: int, seed: int, users: int | None = None,
              neighbours: int = NEIGHBOURS) -> RecommendationTask:
    """The whole task from ratings and one seed (the split, then ALS's start, from independent streams)."""
    if features < 1:
        raise ConfigError(f"--features must be 1 or more, not {features}")
    split_rng, als_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    user_ids, split = split_ratings(ratings, users, split_rng)
    raw = split.train_matrix()
    weights = knn_weights(raw, neighbours)
    graph = nx.Graph(list(weights))
    if not nx.is_connected(graph):
        raise ConfigError(f"the {neighbours}-NN graph of the {len(user_ids)} users has "
                          f"{nx.number_connected_components(graph)} components: pass more --neighbours")
    means = np.array([values.mean() for _, values in split.train])
    rated = raw != 0.0  # ratings are positive (`ratings.read_ratings`): 0 is "not rated"
    phi = als_features(raw - means[:, None], rated, features, als_rng)
    train = [LocalData(phi[columns], values - mean) for (columns, values), mean in zip(split.train, means)]
    test = [LocalData(phi[columns], values - mean) for (columns, values), mean in zip(split.test, means)]
    info = RecommendationInfo(
        ratings=source, user_ids=user_ids, items=split.items, features=features, neighbours=neighbours, seed=seed,
        test_fraction=TEST_FRACTION, als_regularization=ALS_REGULARIZATION, als_iterations=ALS_ITERATIONS,
        train_sizes=[len(share.y) for share in train], test_sizes=[len(share.y) for share in test],
        smoothness=float(np.max(np.sum(phi**2, axis=1))))
    return RecommendationTask(info, train, test, weights)


def _task_command(args: argparse.Namespace) -> int:
    path = SHIPPED_RATINGS if args.synthetic else args.ratings
    features = args.features if args.features is not None else (
        SYNTHETIC_FEATURES if args.synthetic else MOVIELENS_FEATURES)
    ratings = read_ratings(path)
    out = output_folder(args.out, force=args.force)
    seed = chosen_seed(args.seed)
    task = make_task(ratings, str(path), features=features, seed=seed, users=args.users, neighbours=args.neighbours)
    write_task(task, out)
    info = task.info
    print(f"wrote {len(info.user_ids)} agents' training files ({min(info.train_sizes)}-{max(info.train_sizes)} "
          f"ratings, {info.features} movie features from ALS), {TEST_FILE}, {INFO_FILE} and {EDGES_FILE} "
          f"({len(task.weights)} edges of the {info.neighbours}-NN graph) to {out} from {path} (seed {seed}; pass "
          f"--seed {seed} to make them again); publish with: netdp topology import {out / EDGES_FILE} --protocol "
          f"personalized-cd --task least_squares --dimension {info.features} --smoothness {info.smoothness!r} "
          f"--max-examples {max(info.train_sizes)} ...")
    return 0


def register_recommendation(data_sub: argparse._SubParsersAction) -> None:
    """`netdp data recommendation`, beside `data personalized`."""
    command = data_sub.add_parser(
        "recommendation", help="the AISTATS 2018 recommendation task from MovieLens u.data ratings, per-agent files "
                               "and weights",
        description="Every user an agent: its ratings split 80/20, centred on its mean training rating, movie "
                    "features from ALS on the training ratings, least squares; W_ij = 1 between k-nearest neighbours "
                    "by cosine similarity of training ratings. Writes node-<id>.npz, test.npz, task.json and "
                    "similarity.edges.")
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--ratings", type=Path, help="a MovieLens u.data file (e.g. ml-100k/u.data of your own copy: "
                                                     "nothing is downloaded)")
    source.add_argument("--synthetic", action="store_true",
                        help="the shipped synthetic ratings (40 users, 60 movies; `data synthetic-ratings` makes more)")
    command.add_argument("--users", type=int, default=None, help="the first N users by id (default: all)")
    command.add_argument("--features", type=int, default=None,
                         help=f"p: movie features from ALS (default {MOVIELENS_FEATURES}, {SYNTHETIC_FEATURES} with "
                              "--synthetic)")
    command.add_argument("--neighbours", type=int, default=NEIGHBOURS,
                         help=f"k of the k-NN similarity graph (default {NEIGHBOURS})")
    command.add_argument("--out", type=Path, required=True, help="new or empty folder for the files")
    command.add_argument("--seed", type=int, default=None,
                         help="seed of the split and of ALS (default: a fresh one, printed)")
    command.add_argument("--force", action="store_true", help="write into a folder that already holds files")
    command.set_defaults(handler=_task_command)
