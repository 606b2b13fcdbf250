from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class GetRequest(_message.Message):
    __slots__ = ("keys", "sizes")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("values", "queue_us", "service_us")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    SERVICE_US_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[bytes]
    queue_us: int
    service_us: int
    def __init__(self, values: _Optional[_Iterable[bytes]] = ..., queue_us: _Optional[int] = ..., service_us: _Optional[int] = ...) -> None: ...
