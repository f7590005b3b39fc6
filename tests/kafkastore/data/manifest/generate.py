"""How the golden manifest fixtures here were made: by the code at 5945809, before the stored
JSON was declared once (FIELDS). Kept to show what they hold; do not regenerate them: they pin
the bytes older releases wrote. Run from the repository root."""
import json, pathlib
from kafkastore.manifest import (BatchMetadata, CommitInfo, Manifest, ProducerState, SegmentEntry, delta)

out = pathlib.Path("tests/kafkastore/data/manifest")
s1 = SegmentEntry(base_offset=0, next_offset=10, record_count=8, size=1234, min_timestamp=1000,
                  max_timestamp=2000, segment_id="a1b2", writer_id=7, leader_epoch=3,
                  checksum=0xDEADBEEF, index_size=24, timeindex_size=36,
                  aborted_txns=((5, 2, 4),), max_timestamp_offset=6, delete_horizon_ms=1700000000000)
s2 = SegmentEntry(base_offset=10, next_offset=15, record_count=5, size=400, min_timestamp=-1,
                  max_timestamp=-1, segment_id="c3d4", writer_id=-2, leader_epoch=3, checksum=0)
p1 = ProducerState(epoch=2, batches=(BatchMetadata(0, 3, 10, 13, 1500), BatchMetadata(4, 4, 14, 14)),
                   last_timestamp=1500, txn_first_offset=10)
p2 = ProducerState(epoch=0)
base = Manifest(topic="orders", partition=3, version=5, segments=(s1,), log_start_offset=2,
                leader_epoch=3, producers={9: p2}, cleaner_offset=4,
                commit=CommitInfo("c-5", "append", "w-1", 1600000000000),
                extra={"job": {"k": [1, 2]}, "gone": True})
new = Manifest(topic="orders", partition=3, version=6, segments=(s1, s2), log_start_offset=3,
               leader_epoch=4, producers={12: p1}, cleaner_offset=5,
               commit=CommitInfo("c-6", "produce", "w-2", 1600000000001),
               extra={"job": {"k": [1, 2, 3]}, "unicode": "é✓"})
empty = Manifest(topic="t", partition=0, version=1)
(out / "full_v5.json").write_bytes(base.to_json())
(out / "full_v6.json").write_bytes(new.to_json())
(out / "full_empty_v1.json").write_bytes(empty.to_json())
(out / "delta_v6_on_v5.json").write_bytes(delta.encode(delta.delta_dict(base, new)))
print("ok")
