"""Mailboxes: where incoming messages of one kind wait for the protocol that takes them.

* `round_barrier`: synchronous rounds; a round closes when every live neighbour's value is in.
* `exchange_desk`: pairwise exchanges; one at a time per node, atomic for both sides.
* `latest_value`: the newest value per sender (broadcast protocols).
* `token_slot`: tokens in custody; a token is acknowledged only once durably logged.
"""
