from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReportRequest(_message.Message):
    __slots__ = ("app_server_id", "latency_us", "blocking_backend", "backend_stats", "sent_unix_nano")
    APP_SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_BACKEND_FIELD_NUMBER: _ClassVar[int]
    BACKEND_STATS_FIELD_NUMBER: _ClassVar[int]
    SENT_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    app_server_id: str
    latency_us: _containers.RepeatedScalarFieldContainer[int]
    blocking_backend: _containers.RepeatedScalarFieldContainer[int]
    backend_stats: _containers.RepeatedCompositeFieldContainer[BackendStats]
    sent_unix_nano: int
    def __init__(self, app_server_id: _Optional[str] = ..., latency_us: _Optional[_Iterable[int]] = ..., blocking_backend: _Optional[_Iterable[int]] = ..., backend_stats: _Optional[_Iterable[_Union[BackendStats, _Mapping]]] = ..., sent_unix_nano: _Optional[int] = ...) -> None: ...

class BackendStats(_message.Message):
    __slots__ = ("backend", "cache_hits", "cache_misses", "shadow_hits", "shadow_bytes", "latency_bucket", "latency_count", "partition_limit_bytes", "distance_bucket", "distance_count")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    CACHE_MISSES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_HITS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    LATENCY_BUCKET_FIELD_NUMBER: _ClassVar[int]
    LATENCY_COUNT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    backend: int
    cache_hits: int
    cache_misses: int
    shadow_hits: int
    shadow_bytes: int
    latency_bucket: _containers.RepeatedScalarFieldContainer[int]
    latency_count: _containers.RepeatedScalarFieldContainer[int]
    partition_limit_bytes: int
    distance_bucket: _containers.RepeatedScalarFieldContainer[int]
    distance_count: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, backend: _Optional[int] = ..., cache_hits: _Optional[int] = ..., cache_misses: _Optional[int] = ..., shadow_hits: _Optional[int] = ..., shadow_bytes: _Optional[int] = ..., latency_bucket: _Optional[_Iterable[int]] = ..., latency_count: _Optional[_Iterable[int]] = ..., partition_limit_bytes: _Optional[int] = ..., distance_bucket: _Optional[_Iterable[int]] = ..., distance_count: _Optional[_Iterable[int]] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ("accepted_records", "accepted_batches", "rejected_records")
    ACCEPTED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    accepted_records: int
    accepted_batches: int
    rejected_records: int
    def __init__(self, accepted_records: _Optional[int] = ..., accepted_batches: _Optional[int] = ..., rejected_records: _Optional[int] = ...) -> None: ...

class GetRBCRequest(_message.Message):
    __slots__ = ("window_seconds", "low_pct", "high_pct")
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOW_PCT_FIELD_NUMBER: _ClassVar[int]
    HIGH_PCT_FIELD_NUMBER: _ClassVar[int]
    window_seconds: float
    low_pct: float
    high_pct: float
    def __init__(self, window_seconds: _Optional[float] = ..., low_pct: _Optional[float] = ..., high_pct: _Optional[float] = ...) -> None: ...

class BackendRBC(_message.Message):
    __slots__ = ("backend", "blocking_count", "window_blocking")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_COUNT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_BLOCKING_FIELD_NUMBER: _ClassVar[int]
    backend: int
    blocking_count: int
    window_blocking: int
    def __init__(self, backend: _Optional[int] = ..., blocking_count: _Optional[int] = ..., window_blocking: _Optional[int] = ...) -> None: ...

class GetRBCResponse(_message.Message):
    __slots__ = ("backends", "window_requests", "low_latency_us", "high_latency_us", "computed_unix_nanos", "band_requests", "window_seconds", "low_pct", "high_pct", "p50_latency_us", "p99_latency_us")
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    LOW_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    HIGH_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    BAND_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOW_PCT_FIELD_NUMBER: _ClassVar[int]
    HIGH_PCT_FIELD_NUMBER: _ClassVar[int]
    P50_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    P99_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    backends: _containers.RepeatedCompositeFieldContainer[BackendRBC]
    window_requests: int
    low_latency_us: int
    high_latency_us: int
    computed_unix_nanos: int
    band_requests: int
    window_seconds: float
    low_pct: float
    high_pct: float
    p50_latency_us: int
    p99_latency_us: int
    def __init__(self, backends: _Optional[_Iterable[_Union[BackendRBC, _Mapping]]] = ..., window_requests: _Optional[int] = ..., low_latency_us: _Optional[int] = ..., high_latency_us: _Optional[int] = ..., computed_unix_nanos: _Optional[int] = ..., band_requests: _Optional[int] = ..., window_seconds: _Optional[float] = ..., low_pct: _Optional[float] = ..., high_pct: _Optional[float] = ..., p50_latency_us: _Optional[int] = ..., p99_latency_us: _Optional[int] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ("window_seconds", "low_pct", "high_pct")
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOW_PCT_FIELD_NUMBER: _ClassVar[int]
    HIGH_PCT_FIELD_NUMBER: _ClassVar[int]
    window_seconds: float
    low_pct: float
    high_pct: float
    def __init__(self, window_seconds: _Optional[float] = ..., low_pct: _Optional[float] = ..., high_pct: _Optional[float] = ...) -> None: ...

class BackendSummary(_message.Message):
    __slots__ = ("backend", "cache_hits", "cache_misses", "shadow_hits", "shadow_bytes", "queries", "p50_query_latency_us", "p99_query_latency_us", "latency_bucket", "latency_count", "partition_limit_bytes", "p50_backend_latency_us", "p90_backend_latency_us", "distance_bucket", "distance_count")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    CACHE_MISSES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_HITS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    P50_QUERY_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    P99_QUERY_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    LATENCY_BUCKET_FIELD_NUMBER: _ClassVar[int]
    LATENCY_COUNT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    P50_BACKEND_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    P90_BACKEND_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    backend: int
    cache_hits: int
    cache_misses: int
    shadow_hits: int
    shadow_bytes: int
    queries: int
    p50_query_latency_us: int
    p99_query_latency_us: int
    latency_bucket: _containers.RepeatedScalarFieldContainer[int]
    latency_count: _containers.RepeatedScalarFieldContainer[int]
    partition_limit_bytes: int
    p50_backend_latency_us: int
    p90_backend_latency_us: int
    distance_bucket: _containers.RepeatedScalarFieldContainer[int]
    distance_count: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, backend: _Optional[int] = ..., cache_hits: _Optional[int] = ..., cache_misses: _Optional[int] = ..., shadow_hits: _Optional[int] = ..., shadow_bytes: _Optional[int] = ..., queries: _Optional[int] = ..., p50_query_latency_us: _Optional[int] = ..., p99_query_latency_us: _Optional[int] = ..., latency_bucket: _Optional[_Iterable[int]] = ..., latency_count: _Optional[_Iterable[int]] = ..., partition_limit_bytes: _Optional[int] = ..., p50_backend_latency_us: _Optional[int] = ..., p90_backend_latency_us: _Optional[int] = ..., distance_bucket: _Optional[_Iterable[int]] = ..., distance_count: _Optional[_Iterable[int]] = ...) -> None: ...

class AppServerStats(_message.Message):
    __slots__ = ("app_server_id", "backends")
    APP_SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    app_server_id: str
    backends: _containers.RepeatedCompositeFieldContainer[BackendSummary]
    def __init__(self, app_server_id: _Optional[str] = ..., backends: _Optional[_Iterable[_Union[BackendSummary, _Mapping]]] = ...) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("rbc", "backends", "app_servers", "window_seconds", "computed_unix_nanos")
    RBC_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    APP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    rbc: GetRBCResponse
    backends: _containers.RepeatedCompositeFieldContainer[BackendSummary]
    app_servers: _containers.RepeatedCompositeFieldContainer[AppServerStats]
    window_seconds: float
    computed_unix_nanos: int
    def __init__(self, rbc: _Optional[_Union[GetRBCResponse, _Mapping]] = ..., backends: _Optional[_Iterable[_Union[BackendSummary, _Mapping]]] = ..., app_servers: _Optional[_Iterable[_Union[AppServerStats, _Mapping]]] = ..., window_seconds: _Optional[float] = ..., computed_unix_nanos: _Optional[int] = ...) -> None: ...
