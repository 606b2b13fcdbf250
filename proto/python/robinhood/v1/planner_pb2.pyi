from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlannerLimits(_message.Message):
    __slots__ = ("workers", "rate", "extra_latency_ms", "hiccup_prob", "hiccup_ms")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    HICCUP_PROB_FIELD_NUMBER: _ClassVar[int]
    HICCUP_MS_FIELD_NUMBER: _ClassVar[int]
    workers: int
    rate: float
    extra_latency_ms: float
    hiccup_prob: float
    hiccup_ms: float
    def __init__(self, workers: _Optional[int] = ..., rate: _Optional[float] = ..., extra_latency_ms: _Optional[float] = ..., hiccup_prob: _Optional[float] = ..., hiccup_ms: _Optional[float] = ...) -> None: ...

class PlannerCapacityRequest(_message.Message):
    __slots__ = ("op", "limits")
    OP_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    op: str
    limits: _containers.RepeatedCompositeFieldContainer[PlannerLimits]
    def __init__(self, op: _Optional[str] = ..., limits: _Optional[_Iterable[_Union[PlannerLimits, _Mapping]]] = ...) -> None: ...

class PlannerCapacityAnswer(_message.Message):
    __slots__ = ("ok", "error", "capacity")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error: str
    capacity: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, ok: _Optional[bool] = ..., error: _Optional[str] = ..., capacity: _Optional[_Iterable[float]] = ...) -> None: ...

class PlannerBackend(_message.Message):
    __slots__ = ("name", "cacheable_rate", "uncacheable_rate", "capacity", "distance_bucket", "distance_count", "alloc_mb", "mean_value_bytes", "answered_miss_rate", "safe_capacity", "held_mb", "queue", "capacity_slope", "timeout_s", "limit_mb", "overhead_mb")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CACHEABLE_RATE_FIELD_NUMBER: _ClassVar[int]
    UNCACHEABLE_RATE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    ALLOC_MB_FIELD_NUMBER: _ClassVar[int]
    MEAN_VALUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_MISS_RATE_FIELD_NUMBER: _ClassVar[int]
    SAFE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    HELD_MB_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_SLOPE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    LIMIT_MB_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_MB_FIELD_NUMBER: _ClassVar[int]
    name: str
    cacheable_rate: float
    uncacheable_rate: float
    capacity: float
    distance_bucket: _containers.RepeatedScalarFieldContainer[int]
    distance_count: _containers.RepeatedScalarFieldContainer[int]
    alloc_mb: float
    mean_value_bytes: float
    answered_miss_rate: float
    safe_capacity: float
    held_mb: float
    queue: float
    capacity_slope: float
    timeout_s: float
    limit_mb: float
    overhead_mb: float
    def __init__(self, name: _Optional[str] = ..., cacheable_rate: _Optional[float] = ..., uncacheable_rate: _Optional[float] = ..., capacity: _Optional[float] = ..., distance_bucket: _Optional[_Iterable[int]] = ..., distance_count: _Optional[_Iterable[int]] = ..., alloc_mb: _Optional[float] = ..., mean_value_bytes: _Optional[float] = ..., answered_miss_rate: _Optional[float] = ..., safe_capacity: _Optional[float] = ..., held_mb: _Optional[float] = ..., queue: _Optional[float] = ..., capacity_slope: _Optional[float] = ..., timeout_s: _Optional[float] = ..., limit_mb: _Optional[float] = ..., overhead_mb: _Optional[float] = ...) -> None: ...

class PlannerAllocation(_message.Message):
    __slots__ = ("mb",)
    MB_FIELD_NUMBER: _ClassVar[int]
    mb: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, mb: _Optional[_Iterable[float]] = ...) -> None: ...

class PlanRequest(_message.Message):
    __slots__ = ("op", "budget_mb", "floor_mb", "target", "app_servers", "backends", "evaluate", "horizon_s")
    OP_FIELD_NUMBER: _ClassVar[int]
    BUDGET_MB_FIELD_NUMBER: _ClassVar[int]
    FLOOR_MB_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    APP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    EVALUATE_FIELD_NUMBER: _ClassVar[int]
    HORIZON_S_FIELD_NUMBER: _ClassVar[int]
    op: str
    budget_mb: int
    floor_mb: int
    target: float
    app_servers: int
    backends: _containers.RepeatedCompositeFieldContainer[PlannerBackend]
    evaluate: _containers.RepeatedCompositeFieldContainer[PlannerAllocation]
    horizon_s: int
    def __init__(self, op: _Optional[str] = ..., budget_mb: _Optional[int] = ..., floor_mb: _Optional[int] = ..., target: _Optional[float] = ..., app_servers: _Optional[int] = ..., backends: _Optional[_Iterable[_Union[PlannerBackend, _Mapping]]] = ..., evaluate: _Optional[_Iterable[_Union[PlannerAllocation, _Mapping]]] = ..., horizon_s: _Optional[int] = ...) -> None: ...

class PlannedBackend(_message.Message):
    __slots__ = ("name", "miss_ratio", "load", "util", "need_mb", "minmax_mb", "minmax_util", "fill_s", "safe_need_mb")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MISS_RATIO_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    UTIL_FIELD_NUMBER: _ClassVar[int]
    NEED_MB_FIELD_NUMBER: _ClassVar[int]
    MINMAX_MB_FIELD_NUMBER: _ClassVar[int]
    MINMAX_UTIL_FIELD_NUMBER: _ClassVar[int]
    FILL_S_FIELD_NUMBER: _ClassVar[int]
    SAFE_NEED_MB_FIELD_NUMBER: _ClassVar[int]
    name: str
    miss_ratio: float
    load: float
    util: float
    need_mb: int
    minmax_mb: int
    minmax_util: float
    fill_s: float
    safe_need_mb: int
    def __init__(self, name: _Optional[str] = ..., miss_ratio: _Optional[float] = ..., load: _Optional[float] = ..., util: _Optional[float] = ..., need_mb: _Optional[int] = ..., minmax_mb: _Optional[int] = ..., minmax_util: _Optional[float] = ..., fill_s: _Optional[float] = ..., safe_need_mb: _Optional[int] = ...) -> None: ...

class PlannerEvaluation(_message.Message):
    __slots__ = ("util", "worst", "overload", "pressure", "final")
    UTIL_FIELD_NUMBER: _ClassVar[int]
    WORST_FIELD_NUMBER: _ClassVar[int]
    OVERLOAD_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    util: _containers.RepeatedScalarFieldContainer[float]
    worst: float
    overload: float
    pressure: float
    final: float
    def __init__(self, util: _Optional[_Iterable[float]] = ..., worst: _Optional[float] = ..., overload: _Optional[float] = ..., pressure: _Optional[float] = ..., final: _Optional[float] = ...) -> None: ...

class PlanAnswer(_message.Message):
    __slots__ = ("ok", "error", "backends", "worst", "minmax_worst", "evaluated")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    WORST_FIELD_NUMBER: _ClassVar[int]
    MINMAX_WORST_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error: str
    backends: _containers.RepeatedCompositeFieldContainer[PlannedBackend]
    worst: float
    minmax_worst: float
    evaluated: _containers.RepeatedCompositeFieldContainer[PlannerEvaluation]
    def __init__(self, ok: _Optional[bool] = ..., error: _Optional[str] = ..., backends: _Optional[_Iterable[_Union[PlannedBackend, _Mapping]]] = ..., worst: _Optional[float] = ..., minmax_worst: _Optional[float] = ..., evaluated: _Optional[_Iterable[_Union[PlannerEvaluation, _Mapping]]] = ...) -> None: ...
