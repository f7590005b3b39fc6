"""Message classes for Produce v0-2, Fetch v0-3 and ListOffsets v0, which kio does not generate.

kio's generated classes start at Produce v3 and Fetch v4 (the versions that carry record
batch v2). These are the same kind of frozen dataclasses, with the ``kafka_type``
metadata kio's native reader and writer (and :mod:`.frame_check`) work from, written
after Kafka's ``clients/src/main/resources/common/message/*.json``::

    ProduceRequest v0-2  (all three the same)
      Acks int16, TimeoutMs int32,
      TopicData [Name string, PartitionData [Index int32, Records records]]
    ProduceResponse
      v0  Responses [Name string, PartitionResponses [Index int32, ErrorCode int16,
                                                      BaseOffset int64]]
      v1  + ThrottleTimeMs int32 (after Responses)
      v2  + LogAppendTimeMs int64 (after BaseOffset)
    FetchRequest
      v0-2  ReplicaId int32, MaxWaitMs int32, MinBytes int32,
            Topics [Topic string, Partitions [Partition int32, FetchOffset int64,
                                              PartitionMaxBytes int32]]
      v3    + MaxBytes int32 (after MinBytes, KIP-74)
    FetchResponse
      v0    Responses [Topic string, Partitions [PartitionIndex int32, ErrorCode int16,
                                                 HighWatermark int64, Records records]]
      v1-3  ThrottleTimeMs int32 first
    ListOffsetsRequest v0   (the one old consumers reset their position with)
      ReplicaId int32, Topics [Name string, Partitions [PartitionIndex int32,
                                                        Timestamp int64, MaxNumOffsets int32]]
    ListOffsetsResponse v0
      Topics [Name string, Partitions [PartitionIndex int32, ErrorCode int16,
                                       OldStyleOffsets [int64]]]

Field names are kio's for the later versions, so handlers and
:func:`kafkastore.protocol.wire.codec.make` treat both alike. Each version's classes live in
their own module object (registered in ``sys.modules``), so
:func:`~kafkastore.protocol.wire.codec.response_module` finds a version's nested classes by
name as it does for kio's. :func:`request_class` / :func:`response_class` answer
:mod:`.codec` for the versions kio lacks.
"""
# No ``from __future__ import annotations``: kio resolves the field types from the
# evaluated annotations of these dynamically built classes.
import datetime
import sys
import types
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import Records, TZAware, i16, i32, i32Timedelta, i64

from .api_keys import FETCH, LIST_OFFSETS, PRODUCE  # noqa: E402 - below the module's notes
#: The versions served from here (kio has the rest).
PRODUCE_VERSIONS = range(0, 3)
FETCH_VERSIONS = range(0, 4)
_ZERO = i32Timedelta.parse(datetime.timedelta(milliseconds=0))


def _module(name: str, *classes: type) -> types.ModuleType:
    mod = types.ModuleType(f"{__name__}.{name}")
    for cls in classes:
        cls.__module__ = mod.__name__
        cls.__qualname__ = cls.__name__
        setattr(mod, cls.__name__, cls)
    sys.modules[mod.__name__] = mod
    return mod


def _produce_request(v: int) -> type:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionProduceData:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        index: i32 = field(metadata={"kafka_type": "int32"})
        records: Records | None = field(metadata={"kafka_type": "records"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class TopicProduceData:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_data: tuple[PartitionProduceData, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ProduceRequest:
        __type__: ClassVar = EntityType.request
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        acks: i16 = field(metadata={"kafka_type": "int16"})
        timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
        topic_data: tuple[TopicProduceData, ...]

    _module(f"produce_v{v}_request", PartitionProduceData, TopicProduceData, ProduceRequest)
    return ProduceRequest


def _produce_response(v: int) -> type:
    if v >= 2:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class PartitionProduceResponse:
            __type__: ClassVar = EntityType.nested
            __version__: ClassVar[i16] = i16(v)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(PRODUCE)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            index: i32 = field(metadata={"kafka_type": "int32"})
            error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
            base_offset: i64 = field(metadata={"kafka_type": "int64"})
            log_append_time: TZAware | None = field(metadata={"kafka_type": "datetime_i64"}, default=None)
    else:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class PartitionProduceResponse:
            __type__: ClassVar = EntityType.nested
            __version__: ClassVar[i16] = i16(v)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(PRODUCE)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            index: i32 = field(metadata={"kafka_type": "int32"})
            error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
            base_offset: i64 = field(metadata={"kafka_type": "int64"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class TopicProduceResponse:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(PRODUCE)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_responses: tuple[PartitionProduceResponse, ...]

    if v >= 1:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class ProduceResponse:
            __type__: ClassVar = EntityType.response
            __version__: ClassVar[i16] = i16(v)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(PRODUCE)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            responses: tuple[TopicProduceResponse, ...]
            throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"}, default=_ZERO)
    else:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class ProduceResponse:
            __type__: ClassVar = EntityType.response
            __version__: ClassVar[i16] = i16(v)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(PRODUCE)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            responses: tuple[TopicProduceResponse, ...]

    _module(f"produce_v{v}_response", PartitionProduceResponse, TopicProduceResponse, ProduceResponse)
    return ProduceResponse


def _fetch_request(v: int) -> type:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class FetchPartition:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        partition: i32 = field(metadata={"kafka_type": "int32"})
        fetch_offset: i64 = field(metadata={"kafka_type": "int64"})
        partition_max_bytes: i32 = field(metadata={"kafka_type": "int32"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class FetchTopic:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        topic: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[FetchPartition, ...]

    if v >= 3:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class FetchRequest:
            __type__: ClassVar = EntityType.request
            __version__: ClassVar[i16] = i16(v)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(FETCH)
            __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
            replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
            max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
            min_bytes: i32 = field(metadata={"kafka_type": "int32"})
            max_bytes: i32 = field(metadata={"kafka_type": "int32"}, default=i32(2147483647))
            topics: tuple[FetchTopic, ...]
    else:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class FetchRequest:
            __type__: ClassVar = EntityType.request
            __version__: ClassVar[i16] = i16(v)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(FETCH)
            __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
            replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
            max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
            min_bytes: i32 = field(metadata={"kafka_type": "int32"})
            topics: tuple[FetchTopic, ...]

    _module(f"fetch_v{v}_request", FetchPartition, FetchTopic, FetchRequest)
    return FetchRequest


def _fetch_response(v: int) -> type:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionData:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        high_watermark: i64 = field(metadata={"kafka_type": "int64"})
        records: Records | None = field(metadata={"kafka_type": "records"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class FetchableTopicResponse:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(v)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(FETCH)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        topic: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[PartitionData, ...]

    if v >= 1:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class FetchResponse:
            __type__: ClassVar = EntityType.response
            __version__: ClassVar[i16] = i16(v)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(FETCH)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
            responses: tuple[FetchableTopicResponse, ...]
    else:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class FetchResponse:
            __type__: ClassVar = EntityType.response
            __version__: ClassVar[i16] = i16(v)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(FETCH)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            responses: tuple[FetchableTopicResponse, ...]

    _module(f"fetch_v{v}_response", PartitionData, FetchableTopicResponse, FetchResponse)
    return FetchResponse


def _list_offsets_request() -> type:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsPartition:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        timestamp: i64 = field(metadata={"kafka_type": "int64"})
        max_num_offsets: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1))

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsTopic:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[ListOffsetsPartition, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsRequest:
        __type__: ClassVar = EntityType.request
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
        topics: tuple[ListOffsetsTopic, ...]

    _module("list_offsets_v0_request", ListOffsetsPartition, ListOffsetsTopic, ListOffsetsRequest)
    return ListOffsetsRequest


def _list_offsets_response() -> type:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsPartitionResponse:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsTopicResponse:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[ListOffsetsPartitionResponse, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ListOffsetsResponse:
        __type__: ClassVar = EntityType.response
        __version__: ClassVar[i16] = i16(0)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(LIST_OFFSETS)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        topics: tuple[ListOffsetsTopicResponse, ...]

    _module("list_offsets_v0_response", ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
            ListOffsetsResponse)
    return ListOffsetsResponse


_REQUESTS = {**{(PRODUCE, v): _produce_request(v) for v in PRODUCE_VERSIONS},
             **{(FETCH, v): _fetch_request(v) for v in FETCH_VERSIONS},
             (LIST_OFFSETS, 0): _list_offsets_request()}
_RESPONSES = {**{(PRODUCE, v): _produce_response(v) for v in PRODUCE_VERSIONS},
              **{(FETCH, v): _fetch_response(v) for v in FETCH_VERSIONS},
              (LIST_OFFSETS, 0): _list_offsets_response()}


def request_class(api_key: int, version: int) -> type:
    """The request class of an old Produce / Fetch / ListOffsets version (KeyError for any other)."""
    return _REQUESTS[(api_key, version)]


def response_class(api_key: int, version: int) -> type:
    """The response class of an old Produce / Fetch / ListOffsets version (KeyError for any other)."""
    return _RESPONSES[(api_key, version)]
