from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_NORMAL: _ClassVar[Priority]
    PRIORITY_LOW: _ClassVar[Priority]
PRIORITY_NORMAL: Priority
PRIORITY_LOW: Priority

class GetRequest(_message.Message):
    __slots__ = ("keys", "sizes", "priority", "batch_id")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    priority: Priority
    batch_id: int
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., sizes: _Optional[_Iterable[int]] = ..., priority: _Optional[_Union[Priority, str]] = ..., batch_id: _Optional[int] = ...) -> None: ...

class PurgeRequest(_message.Message):
    __slots__ = ("batch_ids",)
    BATCH_IDS_FIELD_NUMBER: _ClassVar[int]
    batch_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, batch_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class PurgeResponse(_message.Message):
    __slots__ = ("dequeued", "stopped")
    DEQUEUED_FIELD_NUMBER: _ClassVar[int]
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    dequeued: int
    stopped: int
    def __init__(self, dequeued: _Optional[int] = ..., stopped: _Optional[int] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("values", "queue_us", "service_us")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    SERVICE_US_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[bytes]
    queue_us: int
    service_us: int
    def __init__(self, values: _Optional[_Iterable[bytes]] = ..., queue_us: _Optional[int] = ..., service_us: _Optional[int] = ...) -> None: ...
