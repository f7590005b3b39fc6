"""Produce and Fetch requests over a raw connection (tests/protocol/wire.py's ``Wire``),
and batches to produce."""
from __future__ import annotations

import datetime
import time

from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.produce.v9 import request as prod_req

from kafkastore.format.record_batch import Record, encode_batch


def batch(values, *, pid=-1, epoch=-1, seq=-1, ts=None, compression=0):
    now = int(time.time() * 1000) if ts is None else ts
    recs = [Record(offset=i, timestamp=now, key=b"k%d" % i, value=v, headers=())
            for i, v in enumerate(values)]
    return encode_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        compression=compression)


def produce(w, topic, partition, data, acks=-1):
    req = prod_req.ProduceRequest(acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
        prod_req.TopicProduceData(name=topic, partition_data=(
            prod_req.PartitionProduceData(index=partition, records=data),)),))
    if acks == 0:
        w.send(req)
        return None
    r = w.call(req).responses[0].partition_responses[0]
    return int(r.error_code), r.base_offset


def fetch(w, topic, partition, offset, *, max_wait_ms=0, min_bytes=1, isolation=0, max_bytes=1 << 20):
    req = fetch_req.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, isolation_level=isolation,
        topics=(fetch_req.FetchTopic(topic=topic, partitions=(fetch_req.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes),)),),
        forgotten_topics_data=())
    return w.call(req).responses[0].partitions[0]
