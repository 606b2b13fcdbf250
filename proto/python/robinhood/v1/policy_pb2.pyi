from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PolicyOpenRequest(_message.Message):
    __slots__ = ("op", "topology", "app_server", "timeline")
    OP_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    APP_SERVER_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    op: str
    topology: str
    app_server: str
    timeline: str
    def __init__(self, op: _Optional[str] = ..., topology: _Optional[str] = ..., app_server: _Optional[str] = ..., timeline: _Optional[str] = ...) -> None: ...

class PolicyPartition(_message.Message):
    __slots__ = ("name", "backend_id", "initial_mb")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    INITIAL_MB_FIELD_NUMBER: _ClassVar[int]
    name: str
    backend_id: int
    initial_mb: int
    def __init__(self, name: _Optional[str] = ..., backend_id: _Optional[int] = ..., initial_mb: _Optional[int] = ...) -> None: ...

class PolicyOpenAnswer(_message.Message):
    __slots__ = ("ok", "app_server", "policy", "needs_rbc", "budget_bytes", "floor_bytes", "interval_s", "partitions", "budget_mb", "rbc_window_s")
    OK_FIELD_NUMBER: _ClassVar[int]
    APP_SERVER_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    NEEDS_RBC_FIELD_NUMBER: _ClassVar[int]
    BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    FLOOR_BYTES_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_MB_FIELD_NUMBER: _ClassVar[int]
    RBC_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    app_server: str
    policy: str
    needs_rbc: bool
    budget_bytes: int
    floor_bytes: int
    interval_s: float
    partitions: _containers.RepeatedCompositeFieldContainer[PolicyPartition]
    budget_mb: int
    rbc_window_s: float
    def __init__(self, ok: _Optional[bool] = ..., app_server: _Optional[str] = ..., policy: _Optional[str] = ..., needs_rbc: _Optional[bool] = ..., budget_bytes: _Optional[int] = ..., floor_bytes: _Optional[int] = ..., interval_s: _Optional[float] = ..., partitions: _Optional[_Iterable[_Union[PolicyPartition, _Mapping]]] = ..., budget_mb: _Optional[int] = ..., rbc_window_s: _Optional[float] = ...) -> None: ...

class PolicyPartitionSample(_message.Message):
    __slots__ = ("limit_bytes", "malloced_bytes", "item_bytes", "items", "evictions", "get_hits", "get_misses", "hit_ratio", "slab_classes")
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MALLOCED_BYTES_FIELD_NUMBER: _ClassVar[int]
    ITEM_BYTES_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    GET_HITS_FIELD_NUMBER: _ClassVar[int]
    GET_MISSES_FIELD_NUMBER: _ClassVar[int]
    HIT_RATIO_FIELD_NUMBER: _ClassVar[int]
    SLAB_CLASSES_FIELD_NUMBER: _ClassVar[int]
    limit_bytes: int
    malloced_bytes: int
    item_bytes: int
    items: int
    evictions: int
    get_hits: int
    get_misses: int
    hit_ratio: float
    slab_classes: int
    def __init__(self, limit_bytes: _Optional[int] = ..., malloced_bytes: _Optional[int] = ..., item_bytes: _Optional[int] = ..., items: _Optional[int] = ..., evictions: _Optional[int] = ..., get_hits: _Optional[int] = ..., get_misses: _Optional[int] = ..., hit_ratio: _Optional[float] = ..., slab_classes: _Optional[int] = ...) -> None: ...

class PolicyRBCSnapshot(_message.Message):
    __slots__ = ("counts", "window_requests", "band_requests", "p99_latency_us", "low_pct", "high_pct")
    class CountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    BAND_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    P99_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    LOW_PCT_FIELD_NUMBER: _ClassVar[int]
    HIGH_PCT_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.ScalarMap[str, int]
    window_requests: int
    band_requests: int
    p99_latency_us: int
    low_pct: float
    high_pct: float
    def __init__(self, counts: _Optional[_Mapping[str, int]] = ..., window_requests: _Optional[int] = ..., band_requests: _Optional[int] = ..., p99_latency_us: _Optional[int] = ..., low_pct: _Optional[float] = ..., high_pct: _Optional[float] = ...) -> None: ...

class PolicyQueryStats(_message.Message):
    __slots__ = ("hits", "misses", "shadow_hits", "shadow_bytes", "queries", "p50_query_latency_us", "p99_query_latency_us", "limit_bytes", "p50_backend_latency_us", "p90_backend_latency_us", "distance_bucket", "distance_count")
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_HITS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    P50_QUERY_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    P99_QUERY_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    P50_BACKEND_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    P90_BACKEND_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    hits: int
    misses: int
    shadow_hits: int
    shadow_bytes: int
    queries: int
    p50_query_latency_us: int
    p99_query_latency_us: int
    limit_bytes: int
    p50_backend_latency_us: int
    p90_backend_latency_us: int
    distance_bucket: _containers.RepeatedScalarFieldContainer[int]
    distance_count: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, hits: _Optional[int] = ..., misses: _Optional[int] = ..., shadow_hits: _Optional[int] = ..., shadow_bytes: _Optional[int] = ..., queries: _Optional[int] = ..., p50_query_latency_us: _Optional[int] = ..., p99_query_latency_us: _Optional[int] = ..., limit_bytes: _Optional[int] = ..., p50_backend_latency_us: _Optional[int] = ..., p90_backend_latency_us: _Optional[int] = ..., distance_bucket: _Optional[_Iterable[int]] = ..., distance_count: _Optional[_Iterable[int]] = ...) -> None: ...

class PolicyTickRequest(_message.Message):
    __slots__ = ("op", "app_server", "now", "partitions", "rbc", "stats", "local")
    class PartitionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PolicyPartitionSample
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PolicyPartitionSample, _Mapping]] = ...) -> None: ...
    class StatsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PolicyQueryStats
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PolicyQueryStats, _Mapping]] = ...) -> None: ...
    class LocalEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PolicyQueryStats
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PolicyQueryStats, _Mapping]] = ...) -> None: ...
    OP_FIELD_NUMBER: _ClassVar[int]
    APP_SERVER_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RBC_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    op: str
    app_server: str
    now: float
    partitions: _containers.MessageMap[str, PolicyPartitionSample]
    rbc: PolicyRBCSnapshot
    stats: _containers.MessageMap[str, PolicyQueryStats]
    local: _containers.MessageMap[str, PolicyQueryStats]
    def __init__(self, op: _Optional[str] = ..., app_server: _Optional[str] = ..., now: _Optional[float] = ..., partitions: _Optional[_Mapping[str, PolicyPartitionSample]] = ..., rbc: _Optional[_Union[PolicyRBCSnapshot, _Mapping]] = ..., stats: _Optional[_Mapping[str, PolicyQueryStats]] = ..., local: _Optional[_Mapping[str, PolicyQueryStats]] = ...) -> None: ...

class PolicyTickAnswer(_message.Message):
    __slots__ = ("ok", "tick", "targets", "limits_mb", "eligible", "notes")
    class TargetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class LimitsMbEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class EligibleEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bool
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bool] = ...) -> None: ...
    OK_FIELD_NUMBER: _ClassVar[int]
    TICK_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_MB_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    tick: int
    targets: _containers.ScalarMap[str, int]
    limits_mb: _containers.ScalarMap[str, int]
    eligible: _containers.ScalarMap[str, bool]
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ok: _Optional[bool] = ..., tick: _Optional[int] = ..., targets: _Optional[_Mapping[str, int]] = ..., limits_mb: _Optional[_Mapping[str, int]] = ..., eligible: _Optional[_Mapping[str, bool]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class PolicyCloseRequest(_message.Message):
    __slots__ = ("op",)
    OP_FIELD_NUMBER: _ClassVar[int]
    op: str
    def __init__(self, op: _Optional[str] = ...) -> None: ...

class PolicyCloseAnswer(_message.Message):
    __slots__ = ("ok",)
    OK_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    def __init__(self, ok: _Optional[bool] = ...) -> None: ...

class PolicyErrorAnswer(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error: str
    def __init__(self, ok: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...
