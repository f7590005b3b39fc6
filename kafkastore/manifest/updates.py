"""Commits as data: the updates and requirements a commit is made of, and the one pure
function :func:`apply` that turns a version into the next, checking every invariant.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

from ..errors import FencedError, InvalidUpdateError, OffsetOutOfRangeError, RequirementFailedError
from .model import (MAX_PRODUCER_BATCHES, CommitInfo, Manifest, ProducerState, SegmentEntry,
                    _check_int, check_invariants)


class Update:
    """A change to a manifest. ``apply_to`` is pure: it returns a new Manifest."""

    def apply_to(self, m: Manifest) -> Manifest:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class AppendSegments(Update):
    """Append segments at the high watermark (or, to an empty log, at or above it)."""

    segments: tuple[SegmentEntry, ...]

    def apply_to(self, m: Manifest) -> Manifest:
        segs = tuple(self.segments)
        if not segs:
            raise InvalidUpdateError("AppendSegments needs at least one segment")
        first = segs[0]
        hw = m.high_watermark
        if m.segments and first.base_offset != hw:
            raise InvalidUpdateError(
                f"appended segment starts at {first.base_offset}, expected the high watermark {hw}")
        if not m.segments and first.base_offset < hw:
            raise InvalidUpdateError(
                f"appended segment starts at {first.base_offset}, below the high watermark {hw}")
        # An empty log may start higher up (adopting a Kafka log whose start was deleted).
        start = m.log_start_offset if m.segments else first.base_offset
        return replace(m, segments=m.segments + segs, log_start_offset=start)


@dataclass(frozen=True)
class ReplaceSegments(Update):
    """Swap a contiguous run of segments for new ones covering exactly the same offsets (compaction)."""

    remove: tuple[str, ...]
    add: tuple[SegmentEntry, ...]

    def apply_to(self, m: Manifest) -> Manifest:
        remove = list(self.remove)
        add = tuple(self.add)
        if not remove or not add:
            raise InvalidUpdateError("ReplaceSegments needs segments to remove and to add")
        # Fast path: the run starts where its replacement starts; find it by bisection on the
        # sorted base offsets (O(log n): a merge commit holds many replacements of a long log).
        segs, start = m.segments, add[0].base_offset
        lo, hi = 0, len(segs)
        while lo < hi:
            mid = (lo + hi) // 2
            if segs[mid].base_offset < start:
                lo = mid + 1
            else:
                hi = mid
        end = lo + len(remove)
        if (end <= len(segs) and [s.segment_id for s in segs[lo:end]] == remove
                and add[-1].next_offset == segs[end - 1].next_offset):
            return replace(m, segments=segs[:lo] + add + segs[end:])
        # Otherwise the slow path finds out exactly what is wrong.
        ids = m.segment_ids()
        missing = [r for r in remove if r not in ids]
        if missing:
            raise RequirementFailedError(f"segments {missing} are no longer live")
        positions = sorted(ids.index(r) for r in set(remove))
        if len(positions) != len(remove) or positions != list(range(positions[0], positions[-1] + 1)):
            raise InvalidUpdateError("ReplaceSegments must remove a contiguous run of distinct segments")
        lo, hi = positions[0], positions[-1]
        start, end = m.segments[lo].base_offset, m.segments[hi].next_offset
        if add[0].base_offset != start or add[-1].next_offset != end:
            raise InvalidUpdateError(
                f"replacement covers [{add[0].base_offset}, {add[-1].next_offset}), "
                f"must cover exactly [{start}, {end})")
        return replace(m, segments=m.segments[:lo] + add + m.segments[hi + 1:])


@dataclass(frozen=True)
class AdvanceLogStart(Update):
    """Move the log start offset forward (retention, delete-records); drops segments wholly below it.

    A lower offset than the current one is a no-op (idempotent retries).
    """

    offset: int

    def apply_to(self, m: Manifest) -> Manifest:
        _check_int("log start offset", self.offset, 0)
        hw = m.high_watermark
        if self.offset > hw:
            raise OffsetOutOfRangeError(
                f"cannot advance the log start offset to {self.offset}",
                log_start_offset=m.log_start_offset, high_watermark=hw)
        if self.offset <= m.log_start_offset:
            return m
        return replace(m, log_start_offset=self.offset, segments=m.segments_from(self.offset))


@dataclass(frozen=True)
class SetLeaderEpoch(Update):
    """Raise the fencing epoch; writers with an older epoch lose (:class:`FencedError`)."""

    epoch: int

    def apply_to(self, m: Manifest) -> Manifest:
        _check_int("leader epoch", self.epoch, 0)
        if self.epoch < m.leader_epoch:
            raise FencedError(f"leader epoch {self.epoch} is older than the manifest's {m.leader_epoch}")
        return replace(m, leader_epoch=self.epoch)


@dataclass(frozen=True)
class UpdateProducerState(Update):
    """Set (or with ``state=None`` forget) one producer's idempotence state."""

    producer_id: int
    state: ProducerState | None

    def apply_to(self, m: Manifest) -> Manifest:
        _check_int("producer id", self.producer_id, 0)
        producers = dict(m.producers)
        if self.state is None:
            producers.pop(self.producer_id, None)
            return replace(m, producers=producers)
        old = producers.get(self.producer_id)
        if old is not None and self.state.epoch < old.epoch:
            raise FencedError(f"producer {self.producer_id}: epoch {self.state.epoch} is older than "
                              f"the current {old.epoch}")
        producers[self.producer_id] = replace(
            self.state, batches=tuple(self.state.batches)[-MAX_PRODUCER_BATCHES:])
        return replace(m, producers=producers)


@dataclass(frozen=True)
class SetCleanerOffset(Update):
    """Record compaction's checkpoint: offsets below ``offset`` have been cleaned."""

    offset: int

    def apply_to(self, m: Manifest) -> Manifest:
        _check_int("cleaner offset", self.offset, 0)
        return replace(m, cleaner_offset=self.offset)


@dataclass(frozen=True)
class SetExtra(Update):
    """Set ``extra[key]`` to a JSON value (``None`` removes the key): durable state of batch jobs."""

    key: str
    value: Any

    def apply_to(self, m: Manifest) -> Manifest:
        if not isinstance(self.key, str) or not self.key:
            raise InvalidUpdateError(f"extra key must be a non-empty string, got {self.key!r}")
        extra = dict(m.extra)
        if self.value is None:
            extra.pop(self.key, None)
        else:
            try:  # round trip: reject non-JSON values and drop aliasing with the caller's object
                extra[self.key] = json.loads(json.dumps(self.value, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise InvalidUpdateError(f"extra[{self.key!r}] is not a JSON value: {exc}") from None
        return replace(m, extra=extra)


class Requirement:
    """A precondition on the base manifest of a commit."""

    def check(self, m: Manifest) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class AssertVersion(Requirement):
    """The base is exactly this version (0: no manifest yet)."""

    version: int

    def check(self, m: Manifest) -> None:
        if m.version != self.version:
            raise RequirementFailedError(f"manifest is at version {m.version}, expected {self.version}")


@dataclass(frozen=True)
class AssertLeaderEpoch(Requirement):
    """The writer's epoch is at least the manifest's; else it is fenced (:class:`FencedError`)."""

    epoch: int

    def check(self, m: Manifest) -> None:
        if m.leader_epoch > self.epoch:
            raise FencedError(f"writer epoch {self.epoch} is fenced by leader epoch {m.leader_epoch} "
                              f"(manifest version {m.version})")


@dataclass(frozen=True)
class AssertSegmentsPresent(Requirement):
    """These segment ids are all still live."""

    segment_ids: tuple[str, ...]

    def check(self, m: Manifest) -> None:
        missing = sorted(set(self.segment_ids) - set(m.segment_ids()))
        if missing:
            raise RequirementFailedError(f"segments {missing} are no longer live (version {m.version})")


@dataclass(frozen=True)
class AssertHighWatermark(Requirement):
    """The high watermark is exactly ``offset``."""

    offset: int

    def check(self, m: Manifest) -> None:
        if m.high_watermark != self.offset:
            raise RequirementFailedError(
                f"high watermark is {m.high_watermark}, expected {self.offset} (version {m.version})")


@dataclass(frozen=True)
class AssertLogStartOffset(Requirement):
    """The log start offset is exactly ``offset``."""

    offset: int

    def check(self, m: Manifest) -> None:
        if m.log_start_offset != self.offset:
            raise RequirementFailedError(
                f"log start offset is {m.log_start_offset}, expected {self.offset} (version {m.version})")


def apply(base: Manifest | None, updates: Iterable[Update], requirements: Iterable[Requirement] = (),
          *, topic: str | None = None, partition: int | None = None,
          commit: CommitInfo | None = None) -> Manifest:
    """The next version: check ``requirements`` on ``base``, apply ``updates`` in order.

    Pure. ``base`` None means no manifest yet (then ``topic`` and ``partition``
    are required). Raises :class:`FencedError` for an older epoch,
    :class:`RequirementFailedError` when a requirement does not hold,
    :class:`OffsetOutOfRangeError` for a log start past the high watermark and
    :class:`InvalidUpdateError` for anything that would break an invariant.
    """
    if base is None:
        if topic is None or partition is None:
            raise InvalidUpdateError("apply(None, ...) needs the topic and partition")
        current = Manifest.empty(topic, partition)
        check_invariants(current)
    else:
        current = base
        if (topic is not None and topic != base.topic) or (partition is not None and partition != base.partition):
            raise InvalidUpdateError(f"manifest is for {base.topic}/{base.partition}, not {topic}/{partition}")
    for req in requirements:
        if not isinstance(req, Requirement):
            raise InvalidUpdateError(f"not a requirement: {req!r}")
        req.check(current)
    new = current
    for upd in updates:
        if not isinstance(upd, Update):
            raise InvalidUpdateError(f"not an update: {upd!r}")
        new = upd.apply_to(new)
    new = replace(new, version=current.version + 1, commit=commit)
    check_invariants(new, current)
    # Transition rules on top of the per-version invariants.
    if new.high_watermark < current.high_watermark:
        raise InvalidUpdateError(
            f"high watermark would move back from {current.high_watermark} to {new.high_watermark}")
    if new.log_start_offset < current.log_start_offset:
        raise InvalidUpdateError(
            f"log start offset would move back from {current.log_start_offset} to {new.log_start_offset}")
    if new.leader_epoch < current.leader_epoch:
        raise FencedError(f"leader epoch would move back from {current.leader_epoch} to {new.leader_epoch}")
    return new


#: What a committer supplies: given the base (None: no manifest yet), the updates and the
#: requirements of the next version, or None when there is nothing to commit.
Build = Callable[[Manifest | None], "tuple[Sequence[Update], Sequence[Requirement]] | None"]
