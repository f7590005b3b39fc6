"""The one table of the Kafka APIs this broker serves: key, Kafka's name, version range,
KIP-219 client-side throttling, quota exemption.

Every module names an API through this table (``from .api_keys import FETCH`` or
``ApiKey.FETCH``); the handler table checks each registration against its row
(:mod:`kafkastore.protocol.handler_table`), the metrics label requests with ``api_name``, and
the server's throttling reads ``client_throttles`` and ``quota_exempt``. A new API is one
row here plus its handler.
"""
from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    """A Kafka API key with what the broker needs to know about it.

    ``min_version`` / ``max_version``: the versions served (ApiVersions answers the
    registered handler's range, which lies within). ``throttles_from``: from this version
    on the client itself waits out ``throttle_time_ms`` (KIP-219, Kafka's
    ``AbstractResponse.shouldClientThrottle``); APIs newer than KIP-219 have 0.
    ``quota_exempt``: no request-time quota throttles it (a client must be able to
    negotiate and authenticate, as in Kafka).
    """

    def __new__(cls, key: int, kafka_name: str, min_version: int, max_version: int,
                throttles_from: int = 0, quota_exempt: bool = False):
        member = int.__new__(cls, key)
        member._value_ = key
        member.kafka_name = kafka_name
        member.min_version = min_version
        member.max_version = max_version
        member.throttles_from = throttles_from
        member.quota_exempt = quota_exempt
        return member

    PRODUCE = 0, "Produce", 0, 11, 6
    FETCH = 1, "Fetch", 0, 17, 8
    LIST_OFFSETS = 2, "ListOffsets", 0, 9, 3
    METADATA = 3, "Metadata", 0, 12, 6
    OFFSET_COMMIT = 8, "OffsetCommit", 2, 8, 4
    OFFSET_FETCH = 9, "OffsetFetch", 1, 7, 4
    FIND_COORDINATOR = 10, "FindCoordinator", 0, 6, 2
    JOIN_GROUP = 11, "JoinGroup", 0, 9, 3
    HEARTBEAT = 12, "Heartbeat", 0, 4, 2
    LEAVE_GROUP = 13, "LeaveGroup", 0, 5, 2
    SYNC_GROUP = 14, "SyncGroup", 0, 5, 2
    DESCRIBE_GROUPS = 15, "DescribeGroups", 0, 5, 2
    LIST_GROUPS = 16, "ListGroups", 0, 5, 2
    SASL_HANDSHAKE = 17, "SaslHandshake", 1, 1, 0, True
    API_VERSIONS = 18, "ApiVersions", 0, 4, 2, True
    CREATE_TOPICS = 19, "CreateTopics", 2, 7, 3
    DELETE_TOPICS = 20, "DeleteTopics", 1, 5, 2
    DELETE_RECORDS = 21, "DeleteRecords", 0, 2, 1
    INIT_PRODUCER_ID = 22, "InitProducerId", 0, 5, 1
    ADD_PARTITIONS_TO_TXN = 24, "AddPartitionsToTxn", 0, 5, 1
    ADD_OFFSETS_TO_TXN = 25, "AddOffsetsToTxn", 0, 4, 1
    END_TXN = 26, "EndTxn", 0, 4, 1
    WRITE_TXN_MARKERS = 27, "WriteTxnMarkers", 1, 1  # kio has v1 only
    TXN_OFFSET_COMMIT = 28, "TxnOffsetCommit", 0, 4, 1
    DESCRIBE_ACLS = 29, "DescribeAcls", 1, 3, 1
    CREATE_ACLS = 30, "CreateAcls", 1, 3, 1
    DELETE_ACLS = 31, "DeleteAcls", 1, 3, 1
    DESCRIBE_CONFIGS = 32, "DescribeConfigs", 1, 4, 2
    ALTER_CONFIGS = 33, "AlterConfigs", 0, 2, 1
    DESCRIBE_LOG_DIRS = 35, "DescribeLogDirs", 1, 4, 1
    SASL_AUTHENTICATE = 36, "SaslAuthenticate", 0, 2, 1, True
    CREATE_PARTITIONS = 37, "CreatePartitions", 0, 3, 1
    DELETE_GROUPS = 42, "DeleteGroups", 0, 2, 2
    INCREMENTAL_ALTER_CONFIGS = 44, "IncrementalAlterConfigs", 0, 1
    OFFSET_DELETE = 47, "OffsetDelete", 0, 0
    DESCRIBE_CLIENT_QUOTAS = 48, "DescribeClientQuotas", 0, 1
    ALTER_CLIENT_QUOTAS = 49, "AlterClientQuotas", 0, 1
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50, "DescribeUserScramCredentials", 0, 0
    ALTER_USER_SCRAM_CREDENTIALS = 51, "AlterUserScramCredentials", 0, 0
    DESCRIBE_CLUSTER = 60, "DescribeCluster", 0, 1
    DESCRIBE_PRODUCERS = 61, "DescribeProducers", 0, 0
    DESCRIBE_TRANSACTIONS = 65, "DescribeTransactions", 0, 0
    LIST_TRANSACTIONS = 66, "ListTransactions", 0, 1
    DESCRIBE_TOPIC_PARTITIONS = 75, "DescribeTopicPartitions", 0, 0


#: Each key as a plain int under its member's name (``from .api_keys import FETCH``): the
#: hot paths compare ints, and kio's classes carry ints.
globals().update({member.name: int(member) for member in ApiKey})
__all__ = ["ApiKey", "api_name", "client_throttles", "quota_exempt",
           *(member.name for member in ApiKey)]

_BY_KEY = {int(member): member for member in ApiKey}
_NAMES = {int(member): member.kafka_name for member in ApiKey}
_EXEMPT = frozenset(int(member) for member in ApiKey if member.quota_exempt)


def api_name(api_key: int) -> str:
    """Kafka's name of an API key (its number for a key not in the table)."""
    return _NAMES.get(api_key) or str(api_key)


def client_throttles(api_key: int, version: int) -> bool:
    """Whether the client itself waits out a throttle at this version (KIP-219); a key not
    in the table (an extension's) is taken as newer than KIP-219."""
    member = _BY_KEY.get(api_key)
    return member is None or version >= member.throttles_from


def quota_exempt(api_key: int) -> bool:
    """Whether request-time quotas never throttle this API (ApiVersions and SASL)."""
    return api_key in _EXEMPT
