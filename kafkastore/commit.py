"""The one commit engine: optimistic commits with retry, read-back and back-off (DESIGN.md section 3).

Everything kafkastore commits by an atomic conditional write goes through
:class:`CommitEngine`: manifest versions (put-if-absent of version N+1),
producer-id blocks, topic metadata, and the warehouse's Iceberg commits (the
catalog's atomic metadata swap). A commit is data; the engine only runs the
loop every one of them needs:

1. read the current state (:meth:`CommitTarget.read`);
2. plan on it with the user's pure function (:meth:`CommitTarget.plan`): the
   new state, or :class:`Done` when there is nothing to do; its errors
   (failed requirements, fencing, invalid updates) propagate at once;
3. put it atomically (:meth:`CommitTarget.put`). A *conflict* (another writer's
   commit landed first) goes back to 1 after a back-off with full jitter. An
   *unknown outcome* (the request may or may not have been applied; for object
   stores also a conflict, which a client's own retry of a write that landed
   produces) is settled by reading back (:meth:`CommitTarget.read_back`): ours means success,
   someone else's means conflict, absent means the same prepared commit is put
   again (or, for targets whose prepared commit is single-use, a fresh attempt
   whose plan recognises a late landing by the commit's stable identity). When
   that cannot settle it, :class:`~kafkastore.errors.CommitUnknownError`;
   nothing is ever deleted after an unknown outcome.

An optional :class:`Budget` (attempts and/or seconds) bounds step 3's
conflicts; running out raises the one give-up error,
:class:`~kafkastore.errors.CommitGaveUpError` (or ``CommitUnknownError`` if an
attempt's outcome is still in doubt). Time is read only through a
:class:`Clock` and randomness through an injected ``random.Random``, so tests
run the engine without sleeping.
"""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .clock import SYSTEM, Clock  # noqa: F401 - Clock: also the old import name
from .errors import (CommitConflict, CommitGaveUpError, CommitUnknownError, ConfigError,
                     ObjectNotFoundError, StorageError, StoragePermissionError)

P = TypeVar("P")
log = logging.getLogger(__name__)


# The engine's view of time is the library's one clock (kafkastore.clock): it sleeps
# between attempts and measures the budget on monotonic_s(). ``Clock`` and ``SYSTEM_CLOCK``
# keep their old import names here; tests pass fakes (``Clock(sleep=slept.append)``).
SYSTEM_CLOCK = SYSTEM


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off with full jitter: wait ``n`` is uniform in ``[0, cap(n)]``,
    ``cap(n) = min(max_s, initial_s * 2 ** (n - 1))``. Full jitter spreads racing
    writers out instead of letting them collide again on a fixed schedule."""

    initial_s: float = 0.01
    max_s: float = 1.0

    def cap(self, n: int) -> float:
        """The longest wait before retry ``n`` (``n`` >= 1)."""
        return min(self.max_s, self.initial_s * (2 ** min(max(n, 1) - 1, 60)))

    def delay(self, n: int, rng: random.Random) -> float:
        """The wait before retry ``n``."""
        return rng.uniform(0, self.cap(n))


@dataclass(frozen=True)
class Budget:
    """How long a commit keeps retrying after conflicts: at most ``max_attempts`` attempts
    and/or ``max_seconds`` since it started. None: no limit (a conflict means another
    writer made progress, so an unbounded loop still finishes while the system lives)."""

    max_attempts: int | None = None
    max_seconds: float | None = None

    def __post_init__(self):
        if self.max_attempts is not None and (not isinstance(self.max_attempts, int)
                                              or self.max_attempts < 1):
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ConfigError(f"max_seconds must be > 0, got {self.max_seconds}")

    def exhausted(self, attempts: int, elapsed_s: float) -> bool:
        """Whether no further attempt may start."""
        return (self.max_attempts is not None and attempts >= self.max_attempts
                or self.max_seconds is not None and elapsed_s >= self.max_seconds)

    def describe(self, attempts: int, elapsed_s: float) -> str:
        """How the budget ran out, for the give-up message."""
        return f"after {attempts} conflicting attempts ({elapsed_s:.3g} s)"


@dataclass(frozen=True)
class Done:
    """What :meth:`CommitTarget.plan` returns when there is nothing to commit: ``value``
    is returned by :meth:`CommitEngine.run` as it is."""

    value: Any


#: What :meth:`CommitTarget.result` returns for a commit that landed but cannot be used
#: (e.g. a manifest version number re-created after expiry): plan again.
RETRY = object()


class CommitTarget(Generic[P]):
    """What one kind of commit supplies to the engine: where its state lives (read, put,
    read back) and its pure planning. Subclasses set the error classes of their store."""

    #: The put lost a race: another writer's commit holds the slot.
    conflict_errors: tuple[type[BaseException], ...] = (CommitConflict,)
    #: The put was refused, so it did not happen (unless an earlier put of this commit may
    #: have landed, which the engine then reads back).
    refused_errors: tuple[type[BaseException], ...] = (StoragePermissionError,)
    #: Errors that always propagate unchanged (never treated as an unknown outcome).
    fatal_errors: tuple[type[BaseException], ...] = ()
    #: The put's outcome is unknown; reading back may fail with these too.
    unknown_errors: tuple[type[BaseException], ...] = (StorageError,)
    #: Whether a conflict on the first put is read back too. A store client that retries a
    #: conditional write by itself (s3fs/botocore after a 5xx or a reset connection) turns a
    #: first attempt that landed into a conflict on the retry: only reading the slot tells
    #: "another writer won" from "we won and lost the response". On for object stores.
    read_back_conflicts: bool = False
    #: Whether a prepared commit may be put again after an unknown outcome read back as
    #: absent. False: the engine plans a fresh attempt instead, and the target's ``plan``
    #: must recognise a late landing of an earlier attempt (a stable identity, e.g. a run id).
    reusable: bool = True
    #: Appended to :class:`CommitUnknownError` messages (what the caller may do).
    unknown_hint: str = ""

    def read(self) -> Any:
        """The current state (None when there is none yet)."""
        raise NotImplementedError

    def plan(self, base: Any, attempt: int) -> "P | Done":
        """The commit to put on ``base`` (pure: no writes), or :class:`Done`."""
        raise NotImplementedError

    def put(self, planned: P) -> None:
        """Write ``planned`` atomically: raise a conflict error if another commit holds its slot."""
        raise NotImplementedError

    def read_back(self, planned: P) -> bool | None:
        """After an unknown outcome: True if ``planned`` landed, False if another commit holds
        its slot, None if the slot is empty."""
        raise NotImplementedError

    def result(self, planned: P, *, attempts: int, read_back: bool) -> Any:
        """What :meth:`CommitEngine.run` returns once ``planned`` landed (or :data:`RETRY`)."""
        return planned

    def describe(self, planned: P) -> str:
        """Names the commit in error messages."""
        return repr(planned)


_LANDED, _READ_BACK, _CONFLICT, _ABSENT = "landed", "read back", "conflict", "absent"


class CommitEngine:
    """Runs :class:`CommitTarget` commits (see the module docstring).

    ``unknown_retries``: after an unknown outcome, how often the read-back and the
    re-put are retried before :class:`CommitUnknownError`.
    """

    def __init__(self, *, backoff: Backoff = Backoff(), budget: Budget = Budget(),
                 unknown_retries: int = 3, clock: Clock | None = None,
                 rng: random.Random | None = None):
        if unknown_retries < 0:
            raise ConfigError(f"unknown_retries must be >= 0, got {unknown_retries}")
        self.backoff = backoff
        self.budget = budget
        self.unknown_retries = unknown_retries
        self.clock = clock or SYSTEM_CLOCK
        self.rng = rng or random.Random()

    def _wait(self, n: int) -> None:
        self.clock.sleep(self.backoff.delay(n, self.rng))

    def run(self, target: CommitTarget) -> Any:
        """Commit through ``target`` exactly once; returns ``target.result(...)`` or a
        :class:`Done` value. Raises the plan's own errors, :class:`CommitGaveUpError`
        when the budget runs out, :class:`CommitUnknownError` when the outcome stays unknown."""
        started = self.clock.monotonic_s()
        attempts = 0
        in_doubt = None  # a single-use attempt read back as absent: it might still land
        planned = None
        while True:
            if attempts:
                elapsed = self.clock.monotonic_s() - started
                if self.budget.exhausted(attempts, elapsed):
                    if in_doubt is not None:
                        raise CommitUnknownError(
                            f"{in_doubt}: the outcome is unknown (not found when read back, "
                            f"then the budget ran out){target.unknown_hint}")
                    raise CommitGaveUpError(f"gave up {target.describe(planned)} "
                                            f"{self.budget.describe(attempts, elapsed)}")
                self._wait(attempts)
            attempts += 1
            planned = target.plan(target.read(), attempts)
            if isinstance(planned, Done):
                return planned.value
            outcome = self._put(target, planned)
            if outcome == _ABSENT:
                in_doubt = target.describe(planned)
                continue
            if outcome == _CONFLICT:
                continue
            in_doubt = None
            value = target.result(planned, attempts=attempts, read_back=outcome == _READ_BACK)
            if value is not RETRY:
                return value

    def _put(self, target: CommitTarget, planned) -> str:
        uncertain = None  # the exception of an earlier put of ``planned`` that may have landed
        for tries in range(self.unknown_retries + 1):
            if tries:
                self._wait(tries)
            try:
                target.put(planned)
                return _LANDED if uncertain is None else _READ_BACK
            except target.fatal_errors:
                raise
            except target.conflict_errors as exc:
                if uncertain is None and not target.read_back_conflicts:
                    log.info("%s lost a race (%s); retrying", target.describe(planned), exc)
                    return _CONFLICT
                # An earlier put may have been ours: ours, or the store client's own retry
                # of ours, whose first attempt landed and whose response was lost. Empty
                # cannot happen for a held slot.
                if self._read_back(target, planned, uncertain or exc):
                    log.warning("%s: the conflict was our own write (a retried request); "
                                "committed", target.describe(planned))
                    return _READ_BACK
                log.info("%s lost a race (%s); retrying", target.describe(planned), exc)
                return _CONFLICT
            except target.refused_errors as exc:
                if uncertain is None:
                    raise  # refused, so not written: a definite failure, not an unknown outcome
                uncertain = exc
            except target.unknown_errors as exc:
                uncertain = exc
            log.warning("%s: unknown outcome (%s: %s); reading back", target.describe(planned),
                        type(uncertain).__name__, uncertain)
            owner = self._read_back(target, planned, uncertain)
            if owner is not None:
                return _READ_BACK if owner else _CONFLICT
            if not target.reusable:
                return _ABSENT
            # Absent: that put did not land (yet). Put the same commit again.
        raise CommitUnknownError(
            f"cannot tell whether {target.describe(planned)} was written "
            f"(last error {type(uncertain).__name__}: {uncertain}){target.unknown_hint}")

    def _read_back(self, target: CommitTarget, planned, cause: BaseException) -> bool | None:
        last: BaseException = cause
        for tries in range(self.unknown_retries + 1):
            if tries:
                self._wait(tries)
            try:
                return target.read_back(planned)
            except target.fatal_errors:
                raise
            except target.unknown_errors as exc:
                last = exc
        raise CommitUnknownError(
            f"{target.describe(planned)}: {type(cause).__name__}: {cause}; the outcome is unknown "
            f"(it cannot be read back: {type(last).__name__}: {last}){target.unknown_hint}")


class ObjectTarget(CommitTarget[P]):
    """A commit that creates one object with :meth:`Storage.put_if_absent`.

    Subclasses give ``read``, ``plan`` and :meth:`locate` (path and bytes of a
    planned commit); read-back compares the stored bytes with :meth:`is_ours`.
    """

    read_back_conflicts = True

    def __init__(self, storage):
        self.storage = storage

    def locate(self, planned: P) -> tuple[str, bytes]:
        """``(relative path, bytes)`` of ``planned``."""
        raise NotImplementedError

    def is_ours(self, stored: bytes, planned: P) -> bool:
        """Whether ``stored`` (found at ``planned``'s path) is ``planned``. Default: same bytes."""
        return stored == self.locate(planned)[1]

    def put(self, planned: P) -> None:
        self.storage.put_if_absent(*self.locate(planned))

    def read_back(self, planned: P) -> bool | None:
        try:
            stored = self.storage.get(self.locate(planned)[0])
        except ObjectNotFoundError:
            return None
        return self.is_ours(stored, planned)

    def describe(self, planned: P) -> str:
        return f"the commit of {self.locate(planned)[0]}"
