"""Exact ranks of views modulo random primes: the certificate that float arithmetic cannot give.

A float SVD cannot tell a direction that is exactly absent (a saturated Krylov space, a node
whose own value the view pins down) from a real one below rounding, and dropping a real one
understates the loss. The rows are rationals with denominators far below the primes used
here, so they have exact residues mod p, and

    rank_p(K R) ≤ rank_p(K) ≤ rank_Q(K)

for any integer R: a modular rank never over-states. It equals the rational rank unless p
divides every maximal nonzero minor of K, or the random R (n × c, c = the rank being checked
plus SKETCH_MARGIN) loses rank, with probability below c/p (Schwartz–Zippel). The first needs
p among the at most B/30 prime factors of one B-bit minor (B ≈ 5·10⁵ bits at n = 2048: at
most 2·10⁴ of the 5·10⁷ primes in range). `exact`
keeps the largest rank over PRIMES independent random primes, so it falls short only if
every one fails: below 2·10⁻⁷ per view by that worst-case count.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
from flint import fmpz, nmod_mat

# Primes are drawn from [2^30, 2^31): a product of two residues fits int64 with room for a sum.
PRIME_LOW = 1 << 30
PRIMES = 2
# Extra random columns beyond the rank a sketch checks, so that it keeps any larger rank.
SKETCH_MARGIN = 8

Sketch = Callable[[int, np.ndarray], np.ndarray]  # (prime, R) -> the model's rows times R, mod prime


def random_prime(rng: random.Random) -> int:
    """A uniformly drawn prime in [2^30, 2^31)."""
    while True:
        candidate = rng.randrange(PRIME_LOW, 2 * PRIME_LOW) | 1
        if fmpz(candidate).is_prime():
            return candidate


def sketch_columns(n: int, width: int, prime: int, rng: random.Random) -> np.ndarray:
    """A uniformly random n × width matrix of residues mod `prime`."""
    generator = np.random.default_rng(rng.getrandbits(64))
    return generator.integers(0, prime, size=(n, width), dtype=np.int64)


def mulmod(columns: np.ndarray, weights: np.ndarray, values: np.ndarray, prime: int) -> np.ndarray:
    """Row v of the result is Σ_s weights[v, s] · values[columns[v, s]] mod prime (a sparse product).

    `columns`/`weights` hold each row's nonzeros, padded with weight 0. Reducing after every
    term keeps each partial sum below 2^63.
    """
    total = np.zeros((columns.shape[0], values.shape[1]), dtype=np.int64)
    for slot in range(columns.shape[1]):
        total += weights[:, slot, None] * values[columns[:, slot]]
        total %= prime
    return total


def modular_rank(rows: np.ndarray, prime: int) -> int:
    """The rank of an integer matrix modulo `prime`."""
    if rows.size == 0:
        return 0
    return int(nmod_mat(rows.shape[0], rows.shape[1], rows.ravel().tolist(), prime).rank())


def residue(numerator: int, denominator: int, prime: int) -> int:
    """numerator / denominator mod prime (the prime must not divide the denominator)."""
    return numerator * pow(denominator, -1, prime) % prime
