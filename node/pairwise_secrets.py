"""Pairwise secrets: two nodes agree a per-run key, and draw shared Gaussian noise from it.

Each node makes one X25519 key pair per run and sends its public key to every peer over a
mutual-TLS channel (TLS authenticates the sender; the receiver checks run, protocol and that the
sender is a peer like every message). The peers are the neighbours (DECOR), or the nodes that
share a neighbour (secure-neighbourhood: they agree directly, never through the neighbour whose
sum their masks hide, so that node cannot substitute a key). Both ends of pair (i, j), i < j, then derive

    secret_ij = HKDF-SHA256(X25519(own private, peer public), salt = SHA-256(run id),
                            info = label | i | j | their mutual-TLS names | public_i | public_j),

so a secret is bound to the run, the edge and both identities, and a key from another run or
another pair gives another secret. Every shared draw is keyed per (edge, step, purpose):
HKDF(secret_ij, info = step | purpose) keys a ChaCha20 keystream whose 53-bit uniforms become
standard normals (Box–Muller), rounded to a 2^-GRID_BITS grid so that both ends, whatever their
libm, hold the same float. The lower end adds the draw, the higher one subtracts it, so the
pair's terms cancel in any sum of their values.

A secret and every shared draw go to the node's private log only. The view log holds the
public keys that were sent and received: an agreement happened, never its key. A neighbour
sends one public key per run: a second, different one (a restarted node trying to agree again,
or a replay of another key) is refused and logged as refused, and the sender is told so (never
ALREADY_EXISTS, which a sender reads as delivered); a copy of the one taken is acknowledged
without effect. A neighbour whose key has not arrived by the round deadline fails the node: a
pairwise term with no partner would not cancel. In simulation mode (tests, `--virtual` experiments) the key pair
is derived from the run id and the node id, so anyone can recompute it: the secrets are
reproducible and keep nothing from anyone, and every logged agreement says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from node.delivery import CustodyDelivery
from node.errors import NetdpError
from node.journal import Journal
from node.message import Message, MessageId
from node.noise import SamplerKind
from node.refusal import Refusal
from node.security import node_name

if TYPE_CHECKING:
    from node.context import ProtocolContext

KEY_SHARE = "key-share"  # the message kind that carries a node's public key, in chunks (scheme "sequence")
SECRET_PURPOSE = "pairwise-secret"  # private-log purpose of an agreed secret, logged at step = the peer's id
SECURE_MECHANISM = "x25519-hkdf-sha256"
SIMULATION_MECHANISM = "simulation: key pair derived from the public run id, no secrecy"
KEY_BYTES = 32
BYTES_PER_ELEMENT = 6  # 48-bit integers are exact in a float64 payload element
GRID_BITS = 40  # shared draws are multiples of 2^-GRID_BITS (in units of the standard normal)
_LABEL = b"netdp pairwise secret v1"
_DRAW_LABEL = b"netdp shared draw v1"


def key_elements() -> int:
    """How many payload elements a public key takes."""
    return math.ceil(KEY_BYTES / BYTES_PER_ELEMENT)


def key_chunks(dimension: int) -> int:
    """How many key-share messages of `dimension` elements carry one public key."""
    return math.ceil(key_elements() / dimension)


def encode_key(public: bytes, dimension: int) -> list[np.ndarray]:
    """A public key as key-share payloads: 48-bit big-endian integers, zero-padded to whole messages."""
    padded = public + bytes(key_elements() * BYTES_PER_ELEMENT - len(public))
    elements = [float(int.from_bytes(padded[k:k + BYTES_PER_ELEMENT], "big"))
                for k in range(0, len(padded), BYTES_PER_ELEMENT)]
    flat = np.zeros(key_chunks(dimension) * dimension)
    flat[:len(elements)] = elements
    return list(flat.reshape(-1, dimension))


def decode_key(chunks: list[np.ndarray]) -> bytes:
    """The public key that `encode_key` split into `chunks` (refused if a chunk is no key material)."""
    elements = np.concatenate(chunks)[:key_elements()]
    if np.any(elements != np.floor(elements)) or np.any(elements < 0) or np.any(elements >= 2.0 ** 48):
        raise Refusal("INVALID_ARGUMENT", "a key share carries 48-bit non-negative integers")
    raw = b"".join(int(e).to_bytes(BYTES_PER_ELEMENT, "big") for e in elements)
    return raw[:KEY_BYTES]


def key_pair(kind: SamplerKind, run_id: str, node_id: int) -> X25519PrivateKey:
    """This node's key pair for the run: fresh from the OS CSPRNG, or (simulation) recomputable by anyone."""
    if kind == "secure":
        return X25519PrivateKey.generate()
    seed = hashlib.sha256(f"{_LABEL.decode()}|simulation|{run_id}|{node_id}".encode()).digest()
    return X25519PrivateKey.from_private_bytes(seed)


def public_bytes(private: X25519PrivateKey) -> bytes:
    """The raw 32-byte public key."""
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def edge_secret(private: X25519PrivateKey, node_id: int, peer: int, peer_public: bytes, run_id: str) -> bytes:
    """The secret of edge (node_id, peer) for the run, the same at both ends and bound to run, edge and names."""
    low, high = sorted((node_id, peer))
    own = public_bytes(private)
    publics = (own, peer_public) if node_id == low else (peer_public, own)
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    info = b"|".join([_LABEL, str(low).encode(), str(high).encode(), node_name(low).encode(),
                      node_name(high).encode(), *publics])
    return HKDF(hashes.SHA256(), 32, salt=hashlib.sha256(run_id.encode()).digest(), info=info).derive(shared)


def shared_normals(secret: bytes, *, step: int, purpose: str, size: int) -> np.ndarray:
    """`size` standard normals keyed by (the edge's secret, step, purpose): the same at both ends of the edge."""
    info = b"|".join([_DRAW_LABEL, str(step).encode(), purpose.encode()])
    key = HKDF(hashes.SHA256(), 32, salt=None, info=info).derive(secret)
    encryptor = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    words = np.frombuffer(encryptor.update(bytes(16 * size)), dtype=">u8").reshape(size, 2) >> np.uint64(11)
    radius = np.sqrt(-2.0 * np.log((words[:, 0].astype(np.float64) + 1.0) * 2.0 ** -53))  # uniform in (0, 1]
    normals = radius * np.cos(2.0 * np.pi * words[:, 1].astype(np.float64) * 2.0 ** -53)
    return np.round(normals * 2.0 ** GRID_BITS) * 2.0 ** -GRID_BITS


def edge_sign(node_id: int, peer: int) -> float:
    """+1 at the lower end of the edge, −1 at the higher: the pair's terms cancel."""
    return 1.0 if node_id < peer else -1.0


@dataclass(frozen=True)
class PairwiseSecret:
    """One edge's agreed secret, as this node holds it."""

    peer: int
    secret: bytes

    def normals(self, *, step: int, purpose: str, size: int) -> np.ndarray:
        """The edge's shared standard normals for (step, purpose)."""
        return shared_normals(self.secret, step=step, purpose=purpose, size=size)


class KeyShares:
    """The key-share mailbox: each neighbour's public key for this run, taken once."""

    def __init__(self, journal: Journal, *, dimension: int) -> None:
        self._journal = journal
        self._chunks = key_chunks(dimension)
        self._taken: dict[tuple[int, int], tuple[bytes, np.ndarray]] = {}  # (sender, chunk) -> (digest, payload)
        self._changed = asyncio.Condition()

    async def handle(self, sender: int | None, message: Message) -> None:
        """Log and keep a neighbour's key chunk; acknowledge a copy; refuse another key for a chunk already taken."""
        assert sender is not None  # the kind is not sender-anonymous
        chunk = message.id.sequence
        if not 1 <= chunk <= self._chunks:
            raise Refusal("OUT_OF_RANGE", f"a public key is {self._chunks} key-share messages, numbered from 1")
        async with self._changed:
            taken = self._taken.get((sender, chunk))
            if taken is not None and taken[0] == message.digest:
                return
            if taken is not None:
                raise Refusal("FAILED_PRECONDITION", f"node {sender} already sent its key for this run: a node agrees "
                                                "once per run, a restarted one cannot agree again", names_sender=True)
            await self._journal.received(sender, message)
            self._taken[sender, chunk] = (message.digest, message.payload)
            self._changed.notify_all()

    async def wait_for(self, peers: tuple[int, ...], timeout_s: float) -> dict[int, bytes]:
        """The public keys of the peers whose whole key arrived within the timeout."""
        async with self._changed:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._changed.wait_for(lambda: len(self._complete(peers)) == len(peers))
            except TimeoutError:
                pass
            return self._complete(peers)

    def _complete(self, peers: tuple[int, ...]) -> dict[int, bytes]:
        chunks = range(1, self._chunks + 1)
        return {peer: decode_key([self._taken[peer, c][1] for c in chunks]) for peer in peers
                if all((peer, c) in self._taken for c in chunks)}


def key_share_messages(private: X25519PrivateKey, dimension: int) -> list[Message]:
    """This node's public key as the key-share messages it sends every neighbour."""
    return [Message(KEY_SHARE, MessageId(sequence=k + 1), chunk)
            for k, chunk in enumerate(encode_key(public_bytes(private), dimension))]


def log_secrets(journal: Journal, secrets: Mapping[int, PairwiseSecret], kind: SamplerKind) -> None:
    """Every agreed secret to the private log (step = the peer), marked insecure in simulation."""
    mechanism = SECURE_MECHANISM if kind == "secure" else SIMULATION_MECHANISM
    for peer, agreed in sorted(secrets.items()):
        journal.noise(SECRET_PURPOSE, np.frombuffer(agreed.secret, dtype=np.uint8).astype(np.float64),
                      step=peer, mechanism=mechanism, scale=0.0)


class AgreementFailed(NetdpError):
    """A neighbour's key did not arrive, or it refused this node's: the edge has no secret."""


class PairwiseAgreement:
    """A node's key agreement with its peers: the mailbox is registered at start, `agree` runs it once.

    The peers are the neighbours unless the protocol names others (`peers`): nodes that share a
    neighbour agree directly, over their own mutual-TLS channel, and only key shares may then come
    from them (the receiver takes the kind from those peers alone, every other kind from neighbours).
    """

    def __init__(self, context: ProtocolContext[Any], peers: tuple[int, ...] | None = None) -> None:
        self._context = context
        self._peers = context.neighbours() if peers is None else peers
        self._dimension: int = context.params.vector_length  # the receiver checks every payload against it
        self._shares = KeyShares(context.journal, dimension=self._dimension)
        context.on(KEY_SHARE, self._shares.handle, scheme="sequence", payload=True, senders=peers)

    async def agree(self) -> dict[int, PairwiseSecret]:
        """Send this node's public key to every peer, take theirs, and log the secrets privately."""
        context, peers = self._context, self._peers
        kind, run_id, node_id = context.noise.kind, context.topology.run_id, context.node_id
        private = key_pair(kind, run_id, node_id)
        deadline = context.network.startup_deadline_s  # peers start at different times
        for message in key_share_messages(private, self._dimension):
            fates = await context.broadcast(peers, message, CustodyDelivery(context.network.send_attempts), deadline,
                                            wait_for_peer=True)
            refused = sorted(peer for peer, fate in fates.items() if not fate.delivered)
            if refused:
                raise AgreementFailed(f"node {node_id}: peers {refused} did not take its key")
        publics = await self._shares.wait_for(peers, deadline)
        missing = sorted(set(peers) - set(publics))
        if missing:
            raise AgreementFailed(f"node {node_id}: no key from peers {missing} within {deadline:g} s")
        secrets = {peer: PairwiseSecret(peer, edge_secret(private, node_id, peer, publics[peer], run_id))
                   for peer in peers}
        log_secrets(context.journal, secrets, kind)
        return secrets
