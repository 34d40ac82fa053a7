"""Which view-log and private-log records a token summation's nodes can write, and what they name.

The records are the token slot's (`node.mailboxes.token_slot`): a custody record per change
of custody (`received` from a peer, `forwarded` to a peer before each try, `acknowledged`
once the peer has it, `kept` when a walk draws its holder again) and the token message
itself (sent, received, or refused with its value). Hop 0 is where a token is originated,
which logs nothing, so every record names a hop from 1 to the token's last. The ring's sum
token goes K·n hops from node 0 and its result token n hops from node n − 1; the walk's sum
token goes T hops from node 0 and its result is one plain message to every other node.
A record outside these rules cannot belong to the run and is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator_tools.audit.records import carries_value, payload_bytes
from netdp.v1 import viewlog_pb2
from node.mailboxes.token_slot import ACKNOWLEDGED, FORWARDED, KEPT, RECEIVED
from node.message import MessageId, kind_of
from node.protocols import ring_histogram, ring_sum, rw_sgd, walk_sum
from node.protocols.token_sum import NOISE_PURPOSE, OVER, SUM_TOKEN_ID, TOKEN
from node.topology import Topology

PHASES = frozenset({RECEIVED, FORWARDED, ACKNOWLEDGED, KEPT})


@dataclass(frozen=True)
class TokenSpec:
    """One token of a run: the kind of its messages, its hops (holders) in a whole run, its first holder."""

    kind: str
    hops: int
    origin: int


@dataclass(frozen=True)
class TokenRules:
    """What one token summation's logs may hold."""

    tokens: Mapping[str, TokenSpec]  # by token id; the walking token (sum or model) first
    ring: bool  # hop h is held by node (origin + h) mod n, taken from its ring predecessor
    keeps: bool  # a walk may draw its holder again: the hop is `kept`, not received
    result_message: str | None  # the walk's result: a plain message, not a token
    notice_message: str | None = OVER  # a node's farewell: a message with no id and no value
    anonymous: bool = False  # receivers log no sender of the token
    noise_purpose: str = NOISE_PURPOSE
    noise_mechanism: str = "gaussian"

    @property
    def main_token(self) -> str:
        """The id of the token whose hops are the contributions."""
        return next(iter(self.tokens))

    def spec_of_kind(self, kind: str) -> tuple[str, TokenSpec] | None:
        """(token id, spec) of the token whose messages have this kind, if any."""
        return next(((token_id, spec) for token_id, spec in self.tokens.items() if spec.kind == kind), None)


def rules_for(topology: Topology) -> TokenRules:
    """The records a run of `topology`'s token summation writes."""
    params, n = topology.protocol, topology.n
    if params.name in (ring_sum.PROTOCOL_NAME, ring_histogram.PROTOCOL_NAME):
        histogram = params.name == ring_histogram.PROTOCOL_NAME
        return TokenRules(tokens={SUM_TOKEN_ID: TokenSpec(TOKEN, params.cycles * n, 0),
                                  ring_sum.RESULT_TOKEN_ID: TokenSpec(ring_sum.RESULT, n, n - 1)},
                          ring=True, keeps=False, result_message=None,
                          noise_purpose=ring_histogram.RR_PURPOSE if histogram else NOISE_PURPOSE,
                          noise_mechanism="randomized_response" if histogram else "gaussian")
    if params.name == walk_sum.PROTOCOL_NAME:
        return TokenRules(tokens={SUM_TOKEN_ID: TokenSpec(TOKEN, params.steps, walk_sum.START)},
                          ring=False, keeps=True, result_message=walk_sum.RESULT)
    if params.name == rw_sgd.PROTOCOL_NAME:
        return TokenRules(tokens={rw_sgd.MODEL_TOKEN_ID: TokenSpec(TOKEN, params.steps, rw_sgd.START)},
                          ring=False, keeps=True, result_message=None,
                          anonymous=params.sender == "anonymous", noise_purpose=rw_sgd.NOISE_PURPOSE)
    raise ValueError(f"{params.name} is not a token protocol")


def record_problem(rules: TokenRules, topology: Topology, kind: str, entry: Any) -> str | None:
    """Why a view-log record cannot belong to this token summation, or None."""
    if kind == "token":
        return _custody_problem(rules, entry)
    if kind in ("sent", "received", "rejected"):
        return _message_problem(rules, topology, kind, entry)
    return None


def _custody_problem(rules: TokenRules, event: viewlog_pb2.TokenCustody) -> str | None:
    spec = rules.tokens.get(event.token_id)
    if spec is None:
        return f"token {event.token_id!r} is not part of this run"
    if event.phase not in PHASES or (event.phase == KEPT and not rules.keeps):
        return f"custody phase {event.phase!r} is not part of this protocol"
    if not 1 <= event.hop < spec.hops:
        return f"hop {event.hop} of token {event.token_id} is outside 1..{spec.hops - 1}"
    if event.phase == KEPT and event.HasField("peer"):
        return "a kept record names a peer"
    if event.phase != KEPT and not event.HasField("peer") and not (event.phase == RECEIVED and rules.anonymous):
        return f"a {event.phase} record needs a peer"
    return None


def _message_problem(rules: TokenRules, topology: Topology, record_kind: str, entry: Any) -> str | None:
    kind, message_id = kind_of(entry), MessageId.of(entry)
    valued = carries_value(entry.payload)
    if kind == rules.notice_message:
        extra = message_id.outside("none")
        return f"the {kind} message carries no {', '.join(extra) if extra else 'value'}" if extra or valued else None
    if kind == rules.result_message:
        extra = message_id.outside("none")
        if extra:
            return f"the {kind} message carries no {', '.join(extra)}"
    else:
        found = rules.spec_of_kind(kind)
        if found is None:
            return f"message kind {kind!r} is not part of {topology.protocol.name}"
        token_id, spec = found
        extra = message_id.outside("hop")
        if extra or message_id.token_id != token_id:
            return f"a {kind} message names token {token_id!r} and a hop only"
        if not 1 <= message_id.hop < spec.hops:
            return f"hop {message_id.hop} of token {token_id} is outside 1..{spec.hops - 1}"
    if not valued and record_kind != "rejected":  # a refusal may come before the value was read
        return f"a {kind} message without its value"
    if valued and payload_bytes(entry.payload) != 8 * topology.protocol.vector_length:
        return f"a {kind} value of {payload_bytes(entry.payload) // 8} numbers, not {topology.protocol.vector_length}"
    return None


def inputs_problem(inputs: int, draws: tuple[viewlog_pb2.NoiseDraw, ...]) -> str | None:
    """Why a private log's inputs (one per visit) do not cover its draws (one per noisy visit), or None."""
    late = [draw.step for draw in draws if draw.step >= inputs]
    return f"a draw for visit {late[0]} but {inputs} inputs" if late else None


def draws_problem(draws: tuple[viewlog_pb2.NoiseDraw, ...], purpose: str = NOISE_PURPOSE,
                  mechanism: str = "gaussian") -> str | None:
    """Why a node's noise draws are not the protocol's: of its mechanism, one per noisy visit, in visit order."""
    steps = [draw.step for draw in draws]
    if any(draw.purpose != purpose for draw in draws):
        return f"a noise draw that is not '{purpose}'"
    if any(draw.mechanism not in ("", mechanism) for draw in draws):
        return f"a noise draw that is not {mechanism}"
    if steps != sorted(set(steps)):
        return f"'{purpose}' draws for visits {steps[:5]}, not one per visit in order"
    return None
