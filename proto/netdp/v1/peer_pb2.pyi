from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("run_id", "protocol", "sender", "round", "sequence", "exchange_id", "shape", "kind", "receiver", "token_id", "hop")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    protocol: str
    sender: int
    round: int
    sequence: int
    exchange_id: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    kind: str
    receiver: int
    token_id: str
    hop: int
    def __init__(self, run_id: _Optional[str] = ..., protocol: _Optional[str] = ..., sender: _Optional[int] = ..., round: _Optional[int] = ..., sequence: _Optional[int] = ..., exchange_id: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., kind: _Optional[str] = ..., receiver: _Optional[int] = ..., token_id: _Optional[str] = ..., hop: _Optional[int] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("envelope", "data")
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    envelope: Envelope
    data: bytes
    def __init__(self, envelope: _Optional[_Union[Envelope, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("receiver", "round")
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    receiver: int
    round: int
    def __init__(self, receiver: _Optional[int] = ..., round: _Optional[int] = ...) -> None: ...

class Bundle(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Chunk]
    def __init__(self, messages: _Optional[_Iterable[_Union[Chunk, _Mapping]]] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("code", "detail")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    code: str
    detail: str
    def __init__(self, code: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class BundleReceipt(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[Outcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[Outcome, _Mapping]]] = ...) -> None: ...
