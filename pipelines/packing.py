"""Packing units of work into Spark tasks by bytes (driver only, Spark-free).

A Spark task costs a fixed amount (scheduling, a Python worker round trip,
output files) whatever it reads, so a job with one task per partition or per
segment costs more per record the more partitions a topic has. Jobs pack their
units (load splits, compaction scan ranges) in order into about as many tasks
as there are cores, or as the bytes need at ``max_bytes`` a task.
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["pack_by_bytes"]


def pack_by_bytes(sizes: Sequence[int], parallelism: int, max_bytes: int) -> list[list[int]]:
    """The units (numbers, in order) each task gets: consecutive units packed into at most
    ``want = min(len(sizes), max(parallelism, ceil(total / max_bytes)))`` slices of about
    equal bytes: a unit goes to the slice its byte midpoint falls in, so a slice exceeds the
    even share ``total / want`` by less than its largest unit and there are never more
    slices than ``want`` (greedy filling left a small extra task, a straggler on its own
    core). Every unit is in exactly one slice; no slice is empty."""
    if not sizes:
        return []
    total = sum(sizes)
    want = min(len(sizes), max(parallelism, -(-total // max(1, max_bytes)), 1))
    share = total / want
    slices: list[list[int]] = [[] for _ in range(want)]
    before = 0
    for i, n in enumerate(sizes):
        slices[min(want - 1, int((before + n / 2) / share)) if share else 0].append(i)
        before += n
    return [s for s in slices if s]
