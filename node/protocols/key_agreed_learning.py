"""Public parameters of the learning protocols whose nodes first agree pairwise secrets (decor-gd,
secure-neighbourhood-gd): T gradient steps, each followed by K plain gossip rounds.

Both build on Muffliato-GD's audit, which reads `rounds` and `accelerated`; each adds the field of its
own noise (DECOR's pairwise ratio, the masks' ratio).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from node.protocols.params import LearningParams

if TYPE_CHECKING:
    from node.topology import NetworkParams


class KeyAgreedLearningParams(LearningParams):
    """Steps T and gossip rounds K after each; the subclass names the protocol (`name`, first of its fields, so a
    topology's fields keep their order and digest)."""

    name: str
    steps: int = Field(ge=1, description="gradient steps T")
    gossip_rounds: int = Field(1, ge=1, description="gossip rounds K after every step (DECOR's paper: 1)")

    @property
    def accelerated(self) -> bool:
        """Plain gossip only: Muffliato-GD's audit, which these build on, reads the flag."""
        return False

    @property
    def rounds(self) -> int:
        """Gossip rounds in the whole run: K per step."""
        return self.steps * self.gossip_rounds

    def worst_case_duration_s(self, network: NetworkParams, n: int) -> float:
        """The key agreement and every round waiting their deadlines twice over (`netdp run`'s time limit)."""
        return network.key_agreed_rounds_s(self.rounds)
