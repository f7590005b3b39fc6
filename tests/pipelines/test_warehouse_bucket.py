"""A warehouse whose bucket does not exist: a one-line
BucketNotFoundError naming the bucket, not a raw FileNotFoundError or an "unknown
outcome" commit."""
from __future__ import annotations

import uuid

import boto3
import pytest

from kafkastore.errors import BucketNotFoundError
from pipelines.spec.offset_ranges import OffsetRange
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.commit import KafkaCommit, commit
from tests.helpers.iceberg_tables import SCHEMA, load


def _warehouse(tmp_path, endpoint, bucket):
    return Warehouse(f"s3://{bucket}/wh",
                         catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db"},
                         storage_options={"client_kwargs": {"endpoint_url": endpoint}})


def test_creating_a_table_in_a_missing_bucket(tmp_path, s3_endpoint):
    with pytest.raises(BucketNotFoundError, match="bucket 'no-such-warehouse' .* does not exist"):
        _warehouse(tmp_path, s3_endpoint, "no-such-warehouse").create_table("t", SCHEMA)


def test_committing_after_the_bucket_was_deleted(tmp_path, s3_endpoint):
    bucket = f"wh-{uuid.uuid4().hex[:8]}"
    s3 = boto3.resource("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket=bucket)
    wh = _warehouse(tmp_path, s3_endpoint, bucket)
    load(wh, wh.create_table("t", SCHEMA), "t", 0, 0, 5)
    t = wh.table("t")
    s3.Bucket(bucket).objects.all().delete()
    s3.Bucket(bucket).delete()
    with pytest.raises(BucketNotFoundError, match=f"bucket '{bucket}'"):
        commit(t, KafkaCommit("r2", "load", (OffsetRange("t", 0, 5, 8),), files=()),
                   backoff_s=0.001)
