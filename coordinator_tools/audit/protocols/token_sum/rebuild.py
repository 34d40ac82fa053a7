"""Rebuild a token summation's TokenRun from its replayed view logs.

The sum token's history (`history`) gives the holder of every hop, so the contributions; a
node's view is every token value that reached it, each named by its prefix (the sum token at
hop h: h contributions; the result, token or message: all of them): the values its log holds
(received, or refused with the value), the hops the history gives it from another node, and
the values its senders' logs say were delivered to it (its own log lost them: a note).
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator_tools.audit.protocols.token_sum.history import TokenHistory, token_histories
from coordinator_tools.audit.protocols.token_sum.records import TokenRules, rules_for
from coordinator_tools.audit.protocols.token_sum.run import TokenRun, contributions
from coordinator_tools.audit.records import Finding, MessageKey, NodeLog, carries_value
from node.topology import Topology


def rebuild_run(topology: Topology, logs: Mapping[int, NodeLog], findings: list[Finding]) -> TokenRun:
    """The realized run; every inference and contradiction is appended to `findings`."""
    rules = rules_for(topology)
    histories = token_histories(rules, topology.n, logs, findings)
    made = contributions(topology, histories[rules.main_token].holders)
    views = tuple(_view(node, rules, logs, histories, len(made), findings) for node in range(topology.n))
    return TokenRun(topology, made, views, tuple(histories.values()))


def _view(node: int, rules: TokenRules, logs: Mapping[int, NodeLog], histories: Mapping[str, TokenHistory],
          total: int, findings: list[Finding]) -> tuple[int, ...]:
    """The prefixes of every token value that reached `node`."""
    log = logs.get(node)
    own = log.values_in_view() if log is not None else {}
    keys = list(own)
    inferred = [key.seen_from(sender) for sender, sender_log in sorted(logs.items())
                for key, sent in sender_log.sent.items()
                if key.peer == node and sent.delivered and carries_value(sent.payload)
                and key.seen_from(sender) not in own]
    if inferred:
        findings.append(Finding("info", "inferred_received", node,
                                f"{len(inferred)} token values delivered to node {node} are missing from its log and "
                                "are added to its view from the senders' records"))
    prefixes = {value_prefix(key, rules, total) for key in [*keys, *inferred]}
    for token_id, history in histories.items():
        for h, hop in enumerate(history.hops):
            if hop is not None and hop.holder == node and hop.how in ("received", "inferred"):
                prefixes.add(h if token_id == rules.main_token else total)
    beyond = sorted(p for p in prefixes if p > total)
    if beyond:
        findings.append(Finding("error", "value_beyond_history", node,
                                f"node {node} holds the token's value at hop {beyond[0]}, past the {total} "
                                "contributions its history shows; it is left out"))
    return tuple(sorted(p for p in prefixes if p <= total))


def value_prefix(key: MessageKey, rules: TokenRules, total: int) -> int:
    """How many contributions the value of this message holds: its hop for the walking token, all for a result."""
    return key.id.hop if key.kind != rules.result_message and key.id.token_id == rules.main_token else total
