"""Message classes for Produce v0-2, Fetch v0-3 and ListOffsets v0, which kio does not generate.

kio's generated classes start at Produce v3 and Fetch v4 (the versions that carry record
batch v2). These are the same kind of frozen dataclasses, with the ``kafka_type``
metadata kio's native reader and writer (and :mod:`.frame_check`) work from, written
after Kafka's ``clients/src/main/resources/common/message/*.json``; kio's class header
(entity type, version, API key, header schema) is written by one decorator per message
(:func:`_request_classes`, :func:`_response_classes`)::

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


def _kio_class(entity: EntityType, api_key: int, version: int, header: type):
    """A class decorator: the frozen dataclass kio generates for a message of ``api_key`` at
    ``version``, with kio's class header (entity type, version, not flexible, API key,
    header schema) written here once rather than in each class."""
    def make(cls: type) -> type:
        cls = dataclass(frozen=True, slots=True, kw_only=True)(cls)
        cls.__type__ = entity
        cls.__version__ = i16(version)
        cls.__flexible__ = False
        cls.__api_key__ = i16(api_key)
        cls.__header_schema__ = header
        return cls
    return make


def _request_classes(api_key: int, version: int):
    """The decorators of a request's nested classes and of the request class."""
    return (_kio_class(EntityType.nested, api_key, version, RequestHeader),
            _kio_class(EntityType.request, api_key, version, RequestHeader))


def _response_classes(api_key: int, version: int):
    """The decorators of a response's nested classes and of the response class."""
    return (_kio_class(EntityType.nested, api_key, version, ResponseHeader),
            _kio_class(EntityType.response, api_key, version, ResponseHeader))


def _produce_request(v: int) -> type:
    nested, request = _request_classes(PRODUCE, v)

    @nested
    class PartitionProduceData:
        index: i32 = field(metadata={"kafka_type": "int32"})
        records: Records | None = field(metadata={"kafka_type": "records"})

    @nested
    class TopicProduceData:
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_data: tuple[PartitionProduceData, ...]

    @request
    class ProduceRequest:
        acks: i16 = field(metadata={"kafka_type": "int16"})
        timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
        topic_data: tuple[TopicProduceData, ...]

    _module(f"produce_v{v}_request", PartitionProduceData, TopicProduceData, ProduceRequest)
    return ProduceRequest


def _produce_response(v: int) -> type:
    nested, response = _response_classes(PRODUCE, v)

    if v >= 2:
        @nested
        class PartitionProduceResponse:
            index: i32 = field(metadata={"kafka_type": "int32"})
            error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
            base_offset: i64 = field(metadata={"kafka_type": "int64"})
            log_append_time: TZAware | None = field(metadata={"kafka_type": "datetime_i64"}, default=None)
    else:
        @nested
        class PartitionProduceResponse:
            index: i32 = field(metadata={"kafka_type": "int32"})
            error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
            base_offset: i64 = field(metadata={"kafka_type": "int64"})

    @nested
    class TopicProduceResponse:
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_responses: tuple[PartitionProduceResponse, ...]

    if v >= 1:
        @response
        class ProduceResponse:
            responses: tuple[TopicProduceResponse, ...]
            throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"}, default=_ZERO)
    else:
        @response
        class ProduceResponse:
            responses: tuple[TopicProduceResponse, ...]

    _module(f"produce_v{v}_response", PartitionProduceResponse, TopicProduceResponse, ProduceResponse)
    return ProduceResponse


def _fetch_request(v: int) -> type:
    nested, request = _request_classes(FETCH, v)

    @nested
    class FetchPartition:
        partition: i32 = field(metadata={"kafka_type": "int32"})
        fetch_offset: i64 = field(metadata={"kafka_type": "int64"})
        partition_max_bytes: i32 = field(metadata={"kafka_type": "int32"})

    @nested
    class FetchTopic:
        topic: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[FetchPartition, ...]

    if v >= 3:
        @request
        class FetchRequest:
            replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
            max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
            min_bytes: i32 = field(metadata={"kafka_type": "int32"})
            max_bytes: i32 = field(metadata={"kafka_type": "int32"}, default=i32(2147483647))
            topics: tuple[FetchTopic, ...]
    else:
        @request
        class FetchRequest:
            replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
            max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
            min_bytes: i32 = field(metadata={"kafka_type": "int32"})
            topics: tuple[FetchTopic, ...]

    _module(f"fetch_v{v}_request", FetchPartition, FetchTopic, FetchRequest)
    return FetchRequest


def _fetch_response(v: int) -> type:
    nested, response = _response_classes(FETCH, v)

    @nested
    class PartitionData:
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        high_watermark: i64 = field(metadata={"kafka_type": "int64"})
        records: Records | None = field(metadata={"kafka_type": "records"})

    @nested
    class FetchableTopicResponse:
        topic: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[PartitionData, ...]

    if v >= 1:
        @response
        class FetchResponse:
            throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
            responses: tuple[FetchableTopicResponse, ...]
    else:
        @response
        class FetchResponse:
            responses: tuple[FetchableTopicResponse, ...]

    _module(f"fetch_v{v}_response", PartitionData, FetchableTopicResponse, FetchResponse)
    return FetchResponse


def _list_offsets_request() -> type:
    nested, request = _request_classes(LIST_OFFSETS, 0)

    @nested
    class ListOffsetsPartition:
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        timestamp: i64 = field(metadata={"kafka_type": "int64"})
        max_num_offsets: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1))

    @nested
    class ListOffsetsTopic:
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[ListOffsetsPartition, ...]

    @request
    class ListOffsetsRequest:
        replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
        topics: tuple[ListOffsetsTopic, ...]

    _module("list_offsets_v0_request", ListOffsetsPartition, ListOffsetsTopic, ListOffsetsRequest)
    return ListOffsetsRequest


def _list_offsets_response() -> type:
    nested, response = _response_classes(LIST_OFFSETS, 0)

    @nested
    class ListOffsetsPartitionResponse:
        partition_index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())

    @nested
    class ListOffsetsTopicResponse:
        name: TopicName = field(metadata={"kafka_type": "string"})
        partitions: tuple[ListOffsetsPartitionResponse, ...]

    @response
    class ListOffsetsResponse:
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
