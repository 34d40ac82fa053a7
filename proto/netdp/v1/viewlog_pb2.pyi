from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("shape", "data", "stripped_bytes")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    STRIPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    stripped_bytes: int
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., stripped_bytes: _Optional[int] = ...) -> None: ...

class RunHeader(_message.Message):
    __slots__ = ("run_id", "protocol", "node_id", "topology_digest", "public_parameters_json", "sampler_kind", "section", "started_unix", "payloads_stripped")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_KIND_FIELD_NUMBER: _ClassVar[int]
    SECTION_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_STRIPPED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    protocol: str
    node_id: int
    topology_digest: str
    public_parameters_json: str
    sampler_kind: str
    section: str
    started_unix: float
    payloads_stripped: bool
    def __init__(self, run_id: _Optional[str] = ..., protocol: _Optional[str] = ..., node_id: _Optional[int] = ..., topology_digest: _Optional[str] = ..., public_parameters_json: _Optional[str] = ..., sampler_kind: _Optional[str] = ..., section: _Optional[str] = ..., started_unix: _Optional[float] = ..., payloads_stripped: _Optional[bool] = ...) -> None: ...

class MessageSent(_message.Message):
    __slots__ = ("peer", "round", "sequence", "exchange_id", "payload", "delivered", "attempts", "failure", "kind", "token_id", "hop")
    PEER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    peer: int
    round: int
    sequence: int
    exchange_id: str
    payload: Tensor
    delivered: bool
    attempts: int
    failure: str
    kind: str
    token_id: str
    hop: int
    def __init__(self, peer: _Optional[int] = ..., round: _Optional[int] = ..., sequence: _Optional[int] = ..., exchange_id: _Optional[str] = ..., payload: _Optional[_Union[Tensor, _Mapping]] = ..., delivered: _Optional[bool] = ..., attempts: _Optional[int] = ..., failure: _Optional[str] = ..., kind: _Optional[str] = ..., token_id: _Optional[str] = ..., hop: _Optional[int] = ...) -> None: ...

class MessageReceived(_message.Message):
    __slots__ = ("peer", "round", "sequence", "exchange_id", "payload", "kind", "token_id", "hop")
    PEER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    peer: int
    round: int
    sequence: int
    exchange_id: str
    payload: Tensor
    kind: str
    token_id: str
    hop: int
    def __init__(self, peer: _Optional[int] = ..., round: _Optional[int] = ..., sequence: _Optional[int] = ..., exchange_id: _Optional[str] = ..., payload: _Optional[_Union[Tensor, _Mapping]] = ..., kind: _Optional[str] = ..., token_id: _Optional[str] = ..., hop: _Optional[int] = ...) -> None: ...

class DropOut(_message.Message):
    __slots__ = ("peer", "round", "reason")
    PEER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    peer: int
    round: int
    reason: str
    def __init__(self, peer: _Optional[int] = ..., round: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Rejected(_message.Message):
    __slots__ = ("claimed_sender", "round", "status_code", "detail", "payload", "kind", "sequence", "exchange_id", "token_id", "hop", "payload_sha256")
    CLAIMED_SENDER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    claimed_sender: int
    round: int
    status_code: str
    detail: str
    payload: Tensor
    kind: str
    sequence: int
    exchange_id: str
    token_id: str
    hop: int
    payload_sha256: bytes
    def __init__(self, claimed_sender: _Optional[int] = ..., round: _Optional[int] = ..., status_code: _Optional[str] = ..., detail: _Optional[str] = ..., payload: _Optional[_Union[Tensor, _Mapping]] = ..., kind: _Optional[str] = ..., sequence: _Optional[int] = ..., exchange_id: _Optional[str] = ..., token_id: _Optional[str] = ..., hop: _Optional[int] = ..., payload_sha256: _Optional[bytes] = ...) -> None: ...

class ExchangeEvent(_message.Message):
    __slots__ = ("exchange_id", "peer", "sequence", "role", "phase", "reason", "value_after")
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VALUE_AFTER_FIELD_NUMBER: _ClassVar[int]
    exchange_id: str
    peer: int
    sequence: int
    role: str
    phase: str
    reason: str
    value_after: Tensor
    def __init__(self, exchange_id: _Optional[str] = ..., peer: _Optional[int] = ..., sequence: _Optional[int] = ..., role: _Optional[str] = ..., phase: _Optional[str] = ..., reason: _Optional[str] = ..., value_after: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class TokenCustody(_message.Message):
    __slots__ = ("token_id", "hop", "phase", "peer")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    hop: int
    phase: str
    peer: int
    def __init__(self, token_id: _Optional[str] = ..., hop: _Optional[int] = ..., phase: _Optional[str] = ..., peer: _Optional[int] = ...) -> None: ...

class BudgetSpent(_message.Message):
    __slots__ = ("step", "epsilon", "delta", "mechanism")
    STEP_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    step: int
    epsilon: float
    delta: float
    mechanism: str
    def __init__(self, step: _Optional[int] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., mechanism: _Optional[str] = ...) -> None: ...

class MessageRef(_message.Message):
    __slots__ = ("peer", "kind", "round", "sequence", "exchange_id", "token_id", "hop")
    PEER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    peer: int
    kind: str
    round: int
    sequence: int
    exchange_id: str
    token_id: str
    hop: int
    def __init__(self, peer: _Optional[int] = ..., kind: _Optional[str] = ..., round: _Optional[int] = ..., sequence: _Optional[int] = ..., exchange_id: _Optional[str] = ..., token_id: _Optional[str] = ..., hop: _Optional[int] = ...) -> None: ...

class StepInputs(_message.Message):
    __slots__ = ("step", "inputs")
    STEP_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    step: int
    inputs: _containers.RepeatedCompositeFieldContainer[MessageRef]
    def __init__(self, step: _Optional[int] = ..., inputs: _Optional[_Iterable[_Union[MessageRef, _Mapping]]] = ...) -> None: ...

class FinalOutput(_message.Message):
    __slots__ = ("value", "rounds_completed")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    value: Tensor
    rounds_completed: int
    def __init__(self, value: _Optional[_Union[Tensor, _Mapping]] = ..., rounds_completed: _Optional[int] = ...) -> None: ...

class PrivateInput(_message.Message):
    __slots__ = ("value", "clipped")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CLIPPED_FIELD_NUMBER: _ClassVar[int]
    value: Tensor
    clipped: bool
    def __init__(self, value: _Optional[_Union[Tensor, _Mapping]] = ..., clipped: _Optional[bool] = ...) -> None: ...

class NoiseDraw(_message.Message):
    __slots__ = ("purpose", "value", "step", "mechanism", "scale")
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    purpose: str
    value: Tensor
    step: int
    mechanism: str
    scale: float
    def __init__(self, purpose: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ..., step: _Optional[int] = ..., mechanism: _Optional[str] = ..., scale: _Optional[float] = ...) -> None: ...

class CanaryCoins(_message.Message):
    __slots__ = ("signs", "magnitude")
    SIGNS_FIELD_NUMBER: _ClassVar[int]
    MAGNITUDE_FIELD_NUMBER: _ClassVar[int]
    signs: Tensor
    magnitude: float
    def __init__(self, signs: _Optional[_Union[Tensor, _Mapping]] = ..., magnitude: _Optional[float] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("logged_unix", "header", "sent", "received", "drop_out", "rejected", "final_output", "private_input", "noise", "exchange", "token", "budget", "step_inputs", "canaries")
    LOGGED_UNIX_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SENT_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    DROP_OUT_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    FINAL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_INPUT_FIELD_NUMBER: _ClassVar[int]
    NOISE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    STEP_INPUTS_FIELD_NUMBER: _ClassVar[int]
    CANARIES_FIELD_NUMBER: _ClassVar[int]
    logged_unix: float
    header: RunHeader
    sent: MessageSent
    received: MessageReceived
    drop_out: DropOut
    rejected: Rejected
    final_output: FinalOutput
    private_input: PrivateInput
    noise: NoiseDraw
    exchange: ExchangeEvent
    token: TokenCustody
    budget: BudgetSpent
    step_inputs: StepInputs
    canaries: CanaryCoins
    def __init__(self, logged_unix: _Optional[float] = ..., header: _Optional[_Union[RunHeader, _Mapping]] = ..., sent: _Optional[_Union[MessageSent, _Mapping]] = ..., received: _Optional[_Union[MessageReceived, _Mapping]] = ..., drop_out: _Optional[_Union[DropOut, _Mapping]] = ..., rejected: _Optional[_Union[Rejected, _Mapping]] = ..., final_output: _Optional[_Union[FinalOutput, _Mapping]] = ..., private_input: _Optional[_Union[PrivateInput, _Mapping]] = ..., noise: _Optional[_Union[NoiseDraw, _Mapping]] = ..., exchange: _Optional[_Union[ExchangeEvent, _Mapping]] = ..., token: _Optional[_Union[TokenCustody, _Mapping]] = ..., budget: _Optional[_Union[BudgetSpent, _Mapping]] = ..., step_inputs: _Optional[_Union[StepInputs, _Mapping]] = ..., canaries: _Optional[_Union[CanaryCoins, _Mapping]] = ...) -> None: ...
