"""Kafka's byte formats, as pure functions over bytes and memoryview: no I/O, no clocks.

Record batch v2 (``record_batch``, with ``varint``, ``crc``, ``compression`` and the
control records of ``control``), the batch walker and segment files (``segment``, with
``offset_index`` and ``time_index``), transaction scans (``transactions``), murmur2
placement (``partitioner``), and the Arrow codecs (``arrow_decode``, ``arrow_encode``)
with their optional C kernel (``_native``). Modules here import only each other and
:mod:`kafkastore.errors`; ``tests/test_layers.py`` checks it.
"""
