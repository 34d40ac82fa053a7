"""Ratings in MovieLens-100K's `u.data` format: a user's file read and checked, and a small synthetic set.

MovieLens is never shipped and nothing is downloaded: a recommendation run reads the `u.data` a
user provides (one rating per line, `user<TAB>item<TAB>rating<TAB>timestamp`, positive integer
ids, a positive rating, a non-negative integer timestamp), or the synthetic ratings shipped beside
this module (SHIPPED_RATINGS, in the same format, so the reader is exercised on a real file). Any
problem with a file is a one-line ConfigError naming the file and line: the file is the user's to fix.

The synthetic set is made from one seed (`netdp data synthetic-ratings` writes it): users belong
to a few taste groups (their latent tastes close within a group), items have latent profiles and
quality biases, every user rates 5 to 30 items (good ones, and ones to its taste, more often: who
rates what already tells tastes apart, as in MovieLens), and a rating is the user's taste against
the item's profile, plus the bias and noise of one star, rounded to 1..5 stars. So few noisy
ratings make purely local models overfit, and neighbours by rating similarity mostly share a group:
learning with them helps (MovieLens' picture in the paper's Table 1).
The shipped file is `synthetic_ratings(SHIPPED_USERS, SHIPPED_ITEMS, SHIPPED_SEED)` (a test checks it).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from pathlib import Path

import numpy as np

from coordinator_tools.dataprep.datasets import chosen_seed
from node.errors import ConfigError

SHIPPED_RATINGS = Path(__file__).with_name("synthetic_ratings.data")
SHIPPED_USERS, SHIPPED_ITEMS, SHIPPED_SEED = 40, 60, 0
FIELDS = ("user", "item", "rating", "timestamp")
INTEGER = re.compile(r"[0-9]+")
TASTE_GROUPS = 3
LATENT = 3
TASTE_SPREAD = 0.2  # deviation of a user's taste from its group's
RATED_PER_USER = (5, 30)
SELECTION = 1.0  # how much a user's taste decides what it rates
MEAN_RATING = 3.5
RATING_NOISE = 1.0
FIRST_TIMESTAMP = 874_724_710  # MovieLens-100K's first; the synthetic ratings follow it a minute apart


@dataclasses.dataclass(frozen=True)
class Ratings:
    """Ratings as parallel arrays, one entry per (user, item) pair, with the file's own ids."""

    users: np.ndarray  # int64 user ids
    items: np.ndarray  # int64 item ids
    values: np.ndarray  # float64 ratings
    timestamps: np.ndarray  # int64 seconds


def read_ratings(path: Path) -> Ratings:
    """Every line of a u.data file, checked; no two lines may rate the same (user, item)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: ratings file not found (MovieLens is not shipped: pass the u.data of your own "
                          "copy of MovieLens-100K, or --synthetic)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ratings ({exc})") from None
    rows: list[tuple[int, int, float, int]] = []
    first_line: dict[tuple[int, int], int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row = _parse_line(line, f"{path}:{lineno}")
        pair = row[:2]
        if pair in first_line:
            raise ConfigError(f"{path}:{lineno}: user {pair[0]} already rated item {pair[1]} "
                              f"on line {first_line[pair]}")
        first_line[pair] = lineno
        rows.append(row)
    if not rows:
        raise ConfigError(f"{path}: no ratings")
    users, items, values, timestamps = zip(*rows)
    return Ratings(np.array(users, dtype=np.int64), np.array(items, dtype=np.int64), np.array(values, dtype=float),
                   np.array(timestamps, dtype=np.int64))


def _parse_line(line: str, where: str) -> tuple[int, int, float, int]:
    """user, item, rating, timestamp of one line (tab-separated)."""
    fields = line.rstrip("\r").split("\t")
    if len(fields) != len(FIELDS):
        raise ConfigError(f"{where}: expected {len(FIELDS)} tab-separated fields ({' '.join(FIELDS)}), "
                          f"got {len(fields)}")
    user, item = (_integer(token, name, where, minimum=1) for token, name in zip(fields[:2], FIELDS))
    try:
        rating = float(fields[2])
    except ValueError:
        rating = math.nan
    if not (math.isfinite(rating) and rating > 0.0):  # 0 stands for "not rated" in the rating matrices
        raise ConfigError(f"{where}: rating {fields[2]!r} is not a positive number")
    return user, item, rating, _integer(fields[3], "timestamp", where, minimum=0)


def _integer(token: str, name: str, where: str, *, minimum: int) -> int:
    if not INTEGER.fullmatch(token) or int(token) < minimum:
        raise ConfigError(f"{where}: {name} {token!r} is not an integer >= {minimum}")
    return int(token)


def write_ratings(ratings: Ratings, path: Path) -> None:
    """The ratings as a u.data file (integral ratings written without a decimal point, as MovieLens does)."""
    lines = [f"{user}\t{item}\t{value:g}\t{stamp}" for user, item, value, stamp in
             zip(ratings.users, ratings.items, ratings.values, ratings.timestamps)]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def synthetic_ratings(users: int = SHIPPED_USERS, items: int = SHIPPED_ITEMS, seed: int = SHIPPED_SEED) -> Ratings:
    """Integer ratings 1..5 of `users` users in taste groups on `items` items, all from one seed."""
    if users < 2 or items < RATED_PER_USER[1]:
        raise ConfigError(f"synthetic ratings need at least 2 users and {RATED_PER_USER[1]} items, got {users} users "
                          f"and {items} items")
    rng = np.random.default_rng(seed)
    groups = rng.normal(0.0, 1.0, (TASTE_GROUPS, LATENT))
    tastes = groups[rng.integers(0, TASTE_GROUPS, users)] + rng.normal(0.0, TASTE_SPREAD, (users, LATENT))
    profiles = rng.normal(0.0, 1.0 / math.sqrt(LATENT), (items, LATENT))
    biases = rng.normal(0.0, 0.5, items)
    counts = rng.integers(RATED_PER_USER[0], RATED_PER_USER[1] + 1, users)
    user_ids, item_ids, values = [], [], []
    for user, count in enumerate(counts):
        appeal = np.exp(biases + SELECTION * (profiles @ tastes[user]))  # users watch what they like, and hits
        rated = np.sort(rng.choice(items, size=count, replace=False, p=appeal / appeal.sum()))
        scores = MEAN_RATING + biases[rated] + profiles[rated] @ tastes[user] + rng.normal(0.0, RATING_NOISE, count)
        user_ids.append(np.full(count, user + 1))
        item_ids.append(rated + 1)
        values.append(np.clip(np.rint(scores), 1.0, 5.0))
    total = int(counts.sum())
    return Ratings(np.concatenate(user_ids), np.concatenate(item_ids), np.concatenate(values),
                   FIRST_TIMESTAMP + 60 * np.arange(total, dtype=np.int64))


def _synthetic_command(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.force:
        raise ConfigError(f"{args.out} already exists; pass --force to overwrite it")
    seed = chosen_seed(args.seed)
    ratings = synthetic_ratings(args.users, args.items, seed)
    write_ratings(ratings, args.out)
    print(f"wrote {ratings.values.size} ratings of {args.users} users on {args.items} items to {args.out} in u.data "
          f"format (seed {seed}); make the task with: netdp data recommendation --ratings {args.out} --out DIR")
    return 0


def register_ratings(data_sub: argparse._SubParsersAction) -> None:
    """`netdp data synthetic-ratings`: the generator of the shipped ratings, for other sizes and seeds."""
    command = data_sub.add_parser(
        "synthetic-ratings", help="synthetic movie ratings in MovieLens u.data format (what --synthetic uses)",
        description="Users in taste groups rating 10-40 items each, 1-5 stars, as a MovieLens u.data file. The "
                    f"defaults ({SHIPPED_USERS} users, {SHIPPED_ITEMS} items, seed {SHIPPED_SEED}) make the shipped "
                    "set that `netdp data recommendation --synthetic` reads.")
    command.add_argument("--users", type=int, default=SHIPPED_USERS, help=f"users (default {SHIPPED_USERS})")
    command.add_argument("--items", type=int, default=SHIPPED_ITEMS,
                         help=f"items, at least {RATED_PER_USER[1]} (default {SHIPPED_ITEMS})")
    command.add_argument("--seed", type=int, default=SHIPPED_SEED, help=f"seed (default {SHIPPED_SEED})")
    command.add_argument("--out", type=Path, required=True, help="the u.data file to write")
    command.add_argument("--force", action="store_true", help="overwrite an existing file")
    command.set_defaults(handler=_synthetic_command)
