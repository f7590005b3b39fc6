"""Kafka's classic consumer-group protocol as a state machine (no I/O, injected clock).

One :class:`GroupCoordinator` holds the groups a broker coordinates. Each
group is in one of Kafka's states::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable --join/leave/expiry--> PreparingRebalance
    (no members left) --> Empty;  DeleteGroups --> Dead

as ``kafka.coordinator.group.GroupCoordinator`` runs it: member ids chosen by
the coordinator (``MEMBER_ID_REQUIRED`` for JoinGroup v4+), generations that
fence stale members (``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``,
``REBALANCE_IN_PROGRESS``), session timeouts (heartbeats) and rebalance
timeouts, static membership (``group.instance.id``; a newer instance fences
the older one with ``FENCED_INSTANCE_ID``), protocol selection by vote over
the protocols every member supports. The leader receives every member's
metadata and computes the assignment (client-side assignors); the coordinator
only hands each member its part.

JoinGroup and SyncGroup may have to wait for other members: they take a
``respond`` callback, called exactly once (maybe later, from another call or
from :meth:`GroupCoordinator.tick`). Callbacks must not block; an asyncio
server resolves a future in them. The caller calls :meth:`tick` regularly
(every ~100 ms) to expire sessions and rebalance timeouts.

Storage is the caller's: :meth:`GroupCoordinator.load_group` seeds a group
from what ``__consumer_offsets`` holds, ``on_persist`` receives the group
metadata to write whenever a generation is settled, a group becomes empty, or
half a session timeout passed since the last write (so offline readers can
tell live members from dead ones), and offset commits are validated here
(:meth:`validate_commit`), written by the caller, then recorded
(:meth:`record_commit`).
"""
from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from ...clock import Clock, as_clock
from ...errors import CorruptRecordError
from ...groups.offsets import GroupState
from ...groups.records import (GroupMetadata, MemberMetadata, OffsetAndMetadata,
                               decode_consumer_subscription)

# Kafka error codes used by the group APIs (importers read them here as G.<code>).
from ..wire.error_codes import (COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID,  # noqa: E402,F401
                                GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, ILLEGAL_GENERATION,
                                INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT,
                                MEMBER_ID_REQUIRED, NON_EMPTY_GROUP, NONE, NOT_COORDINATOR,
                                OFFSET_METADATA_TOO_LARGE, REBALANCE_IN_PROGRESS,
                                UNKNOWN_MEMBER_ID, UNKNOWN_TOPIC_OR_PARTITION)

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)


@dataclass(frozen=True)
class CoordinatorConfig:
    """Broker-side group settings, Kafka's names. ``group.min.session.timeout.ms`` is 1000
    here (Kafka: 6000) so that tests and small deployments can detect failures quickly."""

    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 1800000
    offset_metadata_max_bytes: int = 4096
    #: group.initial.rebalance.delay.ms: an empty group waits this long for more members
    initial_rebalance_delay_ms: int = 0


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer. ``members`` (member id, instance id, metadata of the chosen
    protocol) is filled for the leader only."""

    error: int
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup answer: this member's assignment bytes."""

    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """DescribeGroups' view of a group."""

    group_id: str
    error: int
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...] = ()


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline: int = 0                      # heartbeat expiry (clock ms)
    join_cb: Callable[[JoinResult], None] | None = None
    sync_cb: Callable[[SyncResult], None] | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class _Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)   # MEMBER_ID_REQUIRED ids -> expiry
    static: dict[str, str] = field(default_factory=dict)    # group.instance.id -> member id
    rebalance_deadline: int = 0
    join_not_before: int = 0   # group.initial.rebalance.delay.ms of a group that was empty
    persisted_ms: int | None = None
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: Sequence[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred common protocol."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            choice = next(name for name, _ in m.protocols if name in candidates)
            if choice not in votes:
                votes[choice] = 0
                order.append(choice)
            votes[choice] += 1
        return max(order, key=lambda p: (votes[p], -order.index(p)))

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_cb is not None for m in self.members.values())


class GroupCoordinator:
    """The groups one broker coordinates; see the module docstring.

    ``clock`` is a :class:`~kafkastore.clock.Clock` (or an old callable returning epoch ms);
    ``on_persist(GroupMetadata)`` is called (under
    the coordinator's lock, so it must not block) when group metadata should
    be written to ``__consumer_offsets``.
    """

    def __init__(self, *, clock: Clock | Callable[[], int] | None = None,
                 config: CoordinatorConfig | None = None,
                 on_persist: Callable[[GroupMetadata], None] | None = None,
                 new_id: Callable[[], str] | None = None):
        self.clock = as_clock(clock, "ms")
        self.config = config or CoordinatorConfig()
        self.on_persist = on_persist
        self._new_id = new_id or (lambda: str(uuid.uuid4()))
        self._groups: dict[str, _Group] = {}
        self._lock = threading.RLock()

    # -- loading -------------------------------------------------------------
    def is_loaded(self, group_id: str) -> bool:
        """Whether the group's state is in memory (else the caller loads it first)."""
        return group_id in self._groups

    def load_group(self, state: GroupState) -> None:
        """Seed a group from ``__consumer_offsets`` (after a restart or a coordinator move).

        Members written by the previous coordinator come back with fresh session
        deadlines, so consumers that keep heartbeating keep their generation.
        Does nothing if the group is already loaded."""
        with self._lock:
            if state.group_id in self._groups or state.empty:
                return  # an unknown group is created by its first JoinGroup or commit
            g = _Group(state.group_id, offsets=dict(state.offsets))
            meta = state.metadata
            if meta is not None:
                now = self.clock.wall_ms()
                g.generation = meta.generation
                g.protocol_type = meta.protocol_type or None
                live = meta.live_members(now)
                if live and meta.protocol:
                    g.state = STABLE
                    g.protocol = meta.protocol
                    for m in live:
                        g.members[m.member_id] = _Member(
                            m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.session_timeout_ms, m.rebalance_timeout_ms, meta.protocol_type,
                            [(meta.protocol, m.subscription)], m.assignment,
                            deadline=now + m.session_timeout_ms)
                        if m.group_instance_id:
                            g.static[m.group_instance_id] = m.member_id
                    g.leader = meta.leader if meta.leader in g.members else next(iter(g.members))
                    g.persisted_ms = now
            self._groups[state.group_id] = g

    def unload(self, group_id: str) -> None:
        """Forget a group (this broker stopped coordinating it); pending requests get
        NOT_COORDINATOR so that their clients look for the new coordinator."""
        with self._lock:
            g = self._groups.pop(group_id, None)
            if g is None:
                return
            for m in g.members.values():
                self._answer_join(m, JoinResult(NOT_COORDINATOR, m.member_id))
                self._answer_sync(m, SyncResult(NOT_COORDINATOR))

    def loaded_groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    # -- helpers -------------------------------------------------------------
    def _get(self, group_id: str, create: bool) -> _Group | None:
        g = self._groups.get(group_id)
        if g is None and create:
            g = self._groups[group_id] = _Group(group_id)
        return g

    @staticmethod
    def _answer_join(m: _Member, result: JoinResult) -> None:
        cb, m.join_cb = m.join_cb, None
        if cb is not None:
            cb(result)

    @staticmethod
    def _answer_sync(m: _Member, result: SyncResult) -> None:
        cb, m.sync_cb = m.sync_cb, None
        if cb is not None:
            cb(result)

    def _fenced(self, g: _Group, member_id: str, instance_id: str | None) -> bool:
        return bool(instance_id) and g.static.get(instance_id) not in (None, member_id)

    def _member_error(self, g: _Group | None, member_id: str, instance_id: str | None) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID checks shared by every member request."""
        if g is None or g.state == DEAD:
            return UNKNOWN_MEMBER_ID if g is None else COORDINATOR_NOT_AVAILABLE
        if self._fenced(g, member_id, instance_id):
            return FENCED_INSTANCE_ID
        if member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        return NONE

    def _join_result(self, g: _Group, m: _Member) -> JoinResult:
        members = ()
        if m.member_id == g.leader:
            members = tuple((x.member_id, x.instance_id, x.metadata_for(g.protocol))
                            for x in g.members.values())
        return JoinResult(NONE, m.member_id, g.generation, g.protocol_type, g.protocol,
                          g.leader or "", members)

    def _persist(self, g: _Group) -> None:
        g.persisted_ms = self.clock.wall_ms()
        if self.on_persist is None:
            return
        members = tuple(MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host,
                                       m.rebalance_timeout_ms, m.session_timeout_ms,
                                       m.metadata_for(g.protocol), m.assignment)
                        for m in g.members.values()) if g.state == STABLE else ()
        self.on_persist(GroupMetadata(g.group_id, g.protocol_type or "", g.generation,
                                      g.protocol, g.leader, g.persisted_ms, members))

    def _prepare_rebalance(self, g: _Group) -> None:
        if g.state == COMPLETING_REBALANCE:
            # Members waiting for their assignment of the abandoned generation rejoin.
            for m in g.members.values():
                m.assignment = b""
                self._answer_sync(m, SyncResult(REBALANCE_IN_PROGRESS))
        delay = self.config.initial_rebalance_delay_ms if g.state == EMPTY else 0
        g.state = PREPARING_REBALANCE
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.rebalance_deadline = self.clock.wall_ms() + max(timeout, delay)
        g.join_not_before = self.clock.wall_ms() + delay

    def _maybe_complete_join(self, g: _Group) -> None:
        if g.state == PREPARING_REBALANCE and g.all_joined() and g.join_not_before <= self.clock.wall_ms():
            self._complete_join(g)

    def _complete_join(self, g: _Group) -> None:
        for m in [m for m in g.members.values() if m.join_cb is None]:
            self._remove_member(g, m)
        g.pending.clear()
        g.generation += 1
        now = self.clock.wall_ms()
        if not g.members:
            g.state, g.protocol, g.leader = EMPTY, None, None
            self._persist(g)
            return
        g.protocol = g.select_protocol()
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING_REBALANCE
        for m in g.members.values():
            m.assignment = b""
            m.deadline = now + m.session_timeout_ms
            self._answer_join(m, self._join_result(g, m))

    def _remove_member(self, g: _Group, m: _Member) -> None:
        self._answer_join(m, JoinResult(UNKNOWN_MEMBER_ID, m.member_id))
        self._answer_sync(m, SyncResult(UNKNOWN_MEMBER_ID))
        del g.members[m.member_id]
        if m.instance_id and g.static.get(m.instance_id) == m.member_id:
            del g.static[m.instance_id]
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)

    def _member_left(self, g: _Group, m: _Member) -> None:
        self._remove_member(g, m)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        if g.state == PREPARING_REBALANCE and not g.members and not g.pending:
            self._complete_join(g)

    # -- JoinGroup -----------------------------------------------------------
    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                   protocol_type: str, protocols: Sequence[tuple[str, bytes]],
                   session_timeout_ms: int, rebalance_timeout_ms: int,
                   respond: Callable[[JoinResult], None], *, client_id: str = "",
                   client_host: str = "", require_known_member_id: bool = False) -> None:
        """JoinGroup; ``respond`` is called once, now or when the rebalance completes.
        ``rebalance_timeout_ms`` < 0 (JoinGroup v0) means the session timeout."""
        with self._lock:
            protocols = [(n, bytes(md)) for n, md in protocols]
            if rebalance_timeout_ms < 0:
                rebalance_timeout_ms = session_timeout_ms
            if not group_id:
                return respond(JoinResult(INVALID_GROUP_ID, member_id))
            if not (self.config.min_session_timeout_ms <= session_timeout_ms
                    <= self.config.max_session_timeout_ms):
                return respond(JoinResult(INVALID_SESSION_TIMEOUT, member_id))
            g = self._get(group_id, create=not member_id)
            if g is None:
                return respond(JoinResult(UNKNOWN_MEMBER_ID, member_id))
            if g.state == DEAD:
                return respond(JoinResult(COORDINATOR_NOT_AVAILABLE, member_id))
            if not g.supports(protocol_type, protocols):
                return respond(JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id))
            args = (group_instance_id, protocol_type, protocols, session_timeout_ms,
                    rebalance_timeout_ms, respond, client_id, client_host)
            if not member_id:
                self._join_unknown(g, *args, require_known_member_id)
            else:
                self._join_known(g, member_id, *args)

    def _new_member(self, g: _Group, member_id: str, instance_id, protocol_type, protocols,
                    session, rebalance, respond, client_id, client_host) -> _Member:
        m = _Member(member_id, instance_id or None, client_id, client_host, session, rebalance,
                    protocol_type, protocols, deadline=self.clock.wall_ms() + session, join_cb=respond)
        if not g.members:
            g.protocol_type = protocol_type
        g.members[member_id] = m
        if m.instance_id:
            g.static[m.instance_id] = member_id
        if g.leader is None:
            g.leader = member_id
        return m

    def _rebalance_for(self, g: _Group) -> None:
        if g.state in (EMPTY, STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)

    def _join_unknown(self, g: _Group, instance_id, protocol_type, protocols, session,
                      rebalance, respond, client_id, client_host, require_known: bool) -> None:
        new_id = f"{instance_id or client_id or 'member'}-{self._new_id()}"
        if instance_id and instance_id in g.static:
            # A newer instance of a static member: it takes over, the old id is fenced.
            old = g.members[g.static[instance_id]]
            same = old.protocols == protocols
            was_leader = g.leader == old.member_id
            self._answer_join(old, JoinResult(FENCED_INSTANCE_ID, old.member_id))
            self._answer_sync(old, SyncResult(FENCED_INSTANCE_ID))
            del g.members[old.member_id]
            m = self._new_member(g, new_id, instance_id, protocol_type, protocols, session,
                                 rebalance, None, client_id, client_host)
            m.assignment = old.assignment
            if was_leader:
                g.leader = new_id
            if g.state == STABLE and same and not was_leader:
                # Nothing changed for the group: no rebalance (KIP-345).
                return respond(self._join_result(g, m))
            m.join_cb = respond
            return self._rebalance_for(g)
        if require_known and not instance_id:
            g.pending[new_id] = self.clock.wall_ms() + session
            return respond(JoinResult(MEMBER_ID_REQUIRED, new_id))
        self._new_member(g, new_id, instance_id, protocol_type, protocols, session, rebalance,
                         respond, client_id, client_host)
        self._rebalance_for(g)

    def _join_known(self, g: _Group, member_id: str, instance_id, protocol_type, protocols,
                    session, rebalance, respond, client_id, client_host) -> None:
        if member_id in g.pending:
            del g.pending[member_id]
            self._new_member(g, member_id, instance_id, protocol_type, protocols, session,
                             rebalance, respond, client_id, client_host)
            return self._rebalance_for(g)
        if self._fenced(g, member_id, instance_id):
            return respond(JoinResult(FENCED_INSTANCE_ID, member_id))
        m = g.members.get(member_id)
        if m is None or g.state in (EMPTY, DEAD):
            return respond(JoinResult(UNKNOWN_MEMBER_ID, member_id))
        m.deadline = self.clock.wall_ms() + session
        m.session_timeout_ms, m.rebalance_timeout_ms = session, rebalance
        changed = m.protocols != protocols
        if g.state == PREPARING_REBALANCE:
            m.protocols = protocols
            if m.join_cb is not None and m.join_cb is not respond:
                self._answer_join(m, JoinResult(REBALANCE_IN_PROGRESS, member_id))
            m.join_cb = respond
            return self._maybe_complete_join(g)
        if not changed and (g.state == COMPLETING_REBALANCE
                            or (g.state == STABLE and member_id != g.leader)):
            # A retried join of the current generation: answer it again.
            return respond(self._join_result(g, m))
        m.protocols = protocols
        m.join_cb = respond
        self._rebalance_for(g)

    # -- SyncGroup -----------------------------------------------------------
    def sync_group(self, group_id: str, generation: int, member_id: str,
                   group_instance_id: str | None, assignments: Mapping[str, bytes],
                   respond: Callable[[SyncResult], None], *, protocol_type: str | None = None,
                   protocol_name: str | None = None) -> None:
        """SyncGroup; the leader's ``assignments`` (member id -> bytes) settle the generation."""
        with self._lock:
            g = self._groups.get(group_id)
            err = self._member_error(g, member_id, group_instance_id)
            if err:
                return respond(SyncResult(err))
            if generation != g.generation:
                return respond(SyncResult(ILLEGAL_GENERATION))
            if ((protocol_type is not None and protocol_type != g.protocol_type)
                    or (protocol_name is not None and protocol_name != g.protocol)):
                return respond(SyncResult(INCONSISTENT_GROUP_PROTOCOL))
            m = g.members[member_id]
            m.deadline = self.clock.wall_ms() + m.session_timeout_ms
            if g.state == PREPARING_REBALANCE:
                return respond(SyncResult(REBALANCE_IN_PROGRESS))
            if g.state == STABLE:
                return respond(SyncResult(NONE, g.protocol_type, g.protocol, m.assignment))
            # CompletingRebalance
            m.sync_cb = respond
            if member_id == g.leader:
                for x in g.members.values():
                    x.assignment = bytes(assignments.get(x.member_id, b""))
                g.state = STABLE
                self._persist(g)
                for x in g.members.values():
                    self._answer_sync(x, SyncResult(NONE, g.protocol_type, g.protocol, x.assignment))

    # -- Heartbeat / LeaveGroup --------------------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  group_instance_id: str | None = None) -> int:
        """Heartbeat: the error code (REBALANCE_IN_PROGRESS tells the member to rejoin)."""
        with self._lock:
            g = self._groups.get(group_id)
            err = self._member_error(g, member_id, group_instance_id)
            if err:
                return err
            if generation != g.generation:
                return ILLEGAL_GENERATION
            m = g.members[member_id]
            m.deadline = self.clock.wall_ms() + m.session_timeout_ms
            return REBALANCE_IN_PROGRESS if g.state == PREPARING_REBALANCE else NONE

    def leave_group(self, group_id: str,
                    members: Sequence[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """LeaveGroup for ``(member id, instance id)`` pairs (a static member may leave by
        instance id alone): ``(top-level error, per-member errors)``."""
        with self._lock:
            g = self._groups.get(group_id)
            if g is None or g.state == DEAD:
                err = UNKNOWN_MEMBER_ID if g is None else COORDINATOR_NOT_AVAILABLE
                return err, [err] * len(members)
            out = []
            for member_id, instance_id in members:
                if not member_id and instance_id:
                    member_id = g.static.get(instance_id, "")
                if member_id in g.pending and not instance_id:
                    del g.pending[member_id]
                    self._maybe_complete_join(g)
                    out.append(NONE)
                    continue
                err = self._member_error(g, member_id, instance_id)
                if err:
                    out.append(err)
                    continue
                self._member_left(g, g.members[member_id])
                out.append(NONE)
            return NONE, out

    # -- time ----------------------------------------------------------------
    def tick(self) -> None:
        """Expire sessions, pending member ids and rebalance timeouts; refresh the persisted
        metadata of groups with members (see the module docstring)."""
        with self._lock:
            now = self.clock.wall_ms()
            for g in list(self._groups.values()):
                for pid, deadline in list(g.pending.items()):
                    if deadline <= now:
                        del g.pending[pid]
                        self._maybe_complete_join(g)
                for m in list(g.members.values()):
                    waiting = (m.join_cb is not None and g.state == PREPARING_REBALANCE) or (
                        m.sync_cb is not None and g.state == COMPLETING_REBALANCE)
                    if not waiting and m.deadline <= now and m.member_id in g.members:
                        self._member_left(g, m)
                if g.state == PREPARING_REBALANCE and (
                        now >= g.rebalance_deadline
                        or (g.all_joined() and g.join_not_before <= now)):
                    self._complete_join(g)
                if g.state == STABLE and g.members:
                    half = min(m.session_timeout_ms for m in g.members.values()) // 2
                    if g.persisted_ms is None or now - g.persisted_ms >= half:
                        self._persist(g)

    # -- offsets -------------------------------------------------------------
    def validate_commit(self, group_id: str, generation: int, member_id: str,
                        group_instance_id: str | None = None, *,
                        transactional: bool = False) -> int:
        """Whether an offset commit may be written for this member and generation, as Kafka's
        ``GroupCoordinator`` decides it (``handleCommitOffsets`` / ``handleTxnCommitOffsets``
        and ``validateOffsetCommit``), against the group's current state:

        * a commit that names a member (a generation >= 0, a member id or an instance id) is
          checked like every member request: FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
          ILLEGAL_GENERATION (a zombie of an older generation commits nothing);
        * one that names none (generation -1, no member: offsets kept for a client that
          manages its partitions itself) only to a group without members (UNKNOWN_MEMBER_ID
          otherwise); transactional commits are exempt (TxnOffsetCommit v0-v2 carry no member);
        * an unknown group: an OffsetCommit of generation >= 0 is ILLEGAL_GENERATION, others
          create it empty first;
        * not while the group waits for its assignment (REBALANCE_IN_PROGRESS, OffsetCommit).

        A member's accepted OffsetCommit counts as its heartbeat, as in Kafka."""
        with self._lock:
            g = self._groups.get(group_id)
            if g is None:
                if generation >= 0 and not transactional:
                    return ILLEGAL_GENERATION
                g = self._groups[group_id] = _Group(group_id)
            if g.state == DEAD:
                return COORDINATOR_NOT_AVAILABLE
            names_member = generation >= 0 or bool(member_id) or bool(group_instance_id)
            if names_member:
                if self._fenced(g, member_id, group_instance_id):
                    return FENCED_INSTANCE_ID
                if member_id not in g.members:
                    return UNKNOWN_MEMBER_ID
                if generation != g.generation:
                    return ILLEGAL_GENERATION
            elif not transactional and g.state != EMPTY:
                return UNKNOWN_MEMBER_ID
            if transactional or not names_member:
                return NONE
            if g.state == COMPLETING_REBALANCE:
                return REBALANCE_IN_PROGRESS
            m = g.members[member_id]
            m.deadline = self.clock.wall_ms() + m.session_timeout_ms
            return NONE

    def metadata_error(self, metadata: str | None) -> int:
        """OFFSET_METADATA_TOO_LARGE for metadata over ``offset.metadata.max.bytes``."""
        if metadata and len(metadata.encode()) > self.config.offset_metadata_max_bytes:
            return OFFSET_METADATA_TOO_LARGE
        return NONE

    def record_commit(self, group_id: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata]) -> None:
        """Remember offsets the caller has written to ``__consumer_offsets``, if the group is
        still loaded (one dropped meanwhile is read again from the log, which holds them; a
        group made here would hold only these offsets)."""
        with self._lock:
            g = self._groups.get(group_id)
            if g is not None:
                g.offsets.update(offsets)

    def set_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata]) -> None:
        """Take a loaded group's committed offsets from what ``__consumer_offsets`` holds now
        (every writer's, the claimed and the unclaimed); nothing for a group not loaded."""
        with self._lock:
            g = self._groups.get(group_id)
            if g is not None:
                g.offsets = dict(offsets)

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
                      ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """Committed offsets (None where nothing is committed); every one when ``partitions``
        is None."""
        with self._lock:
            g = self._groups.get(group_id)
            offsets = g.offsets if g is not None else {}
            if partitions is None:
                return dict(offsets)
            return {tp: offsets.get(tp) for tp in partitions}

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """Topics the members subscribe to (``consumer`` protocol); None when the group's
        protocol is not ``consumer`` (its members' topics are unknown)."""
        g = self._groups.get(group_id)
        if g is None or not g.members:
            return set()
        if g.protocol_type != "consumer":
            return None
        topics: set[str] = set()
        for m in g.members.values():
            meta = m.metadata_for(g.protocol) if g.protocol else (m.protocols[0][1] if m.protocols else b"")
            try:
                topics.update(decode_consumer_subscription(meta))
            except CorruptRecordError:  # not a consumer subscription: its topics are unknown
                return None
        return topics

    def validate_offset_delete(self, group_id: str,
                               partitions: Sequence[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: ``(top-level error, per-partition error)``; partitions with NONE may
        be deleted (GROUP_SUBSCRIBED_TO_TOPIC for topics live members consume)."""
        with self._lock:
            g = self._groups.get(group_id)
            if g is None or g.state == DEAD or (not g.members and not g.offsets):
                return GROUP_ID_NOT_FOUND, {}
            topics = self.subscribed_topics(group_id)
            if topics is None:
                return NON_EMPTY_GROUP, {}
            return NONE, {tp: GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in topics else NONE
                          for tp in partitions}

    def record_offset_delete(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            g = self._groups.get(group_id)
            if g is not None:
                for tp in partitions:
                    g.offsets.pop(tp, None)

    # -- admin ---------------------------------------------------------------
    def state(self, group_id: str) -> str:
        g = self._groups.get(group_id)
        return DEAD if g is None else g.state

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """``(group id, protocol type, state)`` of the loaded groups (optionally only ``states``)."""
        wanted = {s.lower() for s in states}
        with self._lock:
            return [(g.group_id, g.protocol_type or "", g.state) for g in self._groups.values()
                    if g.state != DEAD and (not wanted or g.state.lower() in wanted)]

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups; an unknown group is ``Dead`` with no members, as in Kafka."""
        with self._lock:
            g = self._groups.get(group_id)
            if g is None:
                return GroupDescription(group_id, NONE, DEAD, "", "")
            members = ()
            if g.state in (STABLE, COMPLETING_REBALANCE, PREPARING_REBALANCE):
                members = tuple(MemberDescription(
                    m.member_id, m.instance_id, m.client_id, m.client_host,
                    m.metadata_for(g.protocol) if g.protocol else b"",
                    m.assignment if g.state == STABLE else b"") for m in g.members.values())
            return GroupDescription(group_id, NONE, g.state, g.protocol_type or "",
                                    (g.protocol or "") if g.state == STABLE else "", members)

    def validate_delete_group(self, group_id: str) -> int:
        """DeleteGroups may go ahead (NONE), or GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP."""
        with self._lock:
            g = self._groups.get(group_id)
            if g is None or g.state == DEAD:
                return GROUP_ID_NOT_FOUND
            if g.members or g.pending:
                return NON_EMPTY_GROUP
            return NONE

    def record_delete_group(self, group_id: str) -> None:
        """The caller has written the tombstones: the group is gone."""
        with self._lock:
            g = self._groups.pop(group_id, None)
            if g is not None:
                g.state = DEAD
