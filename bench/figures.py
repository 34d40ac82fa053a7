"""What a benchmark hands the suite: the sizes it is asked for, and the rows of the table it adds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Sizes:
    """How big to measure: the issue's sizes, or small ones (--quick) that only prove the suite runs."""

    quick: bool
    virtual_n: tuple[int, ...]
    audit_n: tuple[int, ...]
    utility_n: int

    def pick(self, full: T, quick: T) -> T:
        return quick if self.quick else full


@dataclass(frozen=True)
class Row:
    """One line of the table: a figure, the floor it is compared with in the same run, their ratio."""

    figure: str
    value: str
    floor: str
    ratio: float | None
    target: str = ""
