"""The fault harness's client workloads: real Kafka clients (confluent-kafka, aiokafka,
kafka-python) against ``kafkastore serve``, each recording what its clients saw
acknowledged, in the :mod:`checker`'s history format.

A workload has ``topics`` (``{topic: partitions}``; the runner creates them),
``start(bootstrap, stop)`` (starts its client threads; they run until ``stop`` is set),
``join(timeout)`` and ``history()`` (the checker's keys it knows, partitions keyed
``(topic, partition)``). ``errors()`` counts the client errors seen (by name; reported,
not anomalies). A workload may also have ``extra_anomalies(final_committed)``: counts the
checker does not know (the exactly-once pipeline's ``eos-duplicate`` and
``eos-missing-output``); :func:`extra_anomalies` sums them over a list of workloads, for
the runner to add to the checker's counts.

Every value written is unique in the run (workload, client, incarnation and a counter),
so the checker's duplicate count needs no knowledge of the clients. Clients survive
faults: generous timeouts, errors counted rather than raised, and a client that failed
for good (a fatal producer error, a consumer whose calls keep failing) is closed and
made again (a new *incarnation*, recorded in its poll name so the checker sees a new
run of offsets).

Test/bench code: reads the system clock itself.
"""
from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import Counter

#: Client settings that outlast a fault (a broker SIGSTOPped ~8-16 s, S3 storms).
MESSAGE_TIMEOUT_MS = 60000
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_MS = 2000
#: Below the runner's pauses (11-16 s), so a paused coordinator outlives transactions.
TXN_TIMEOUT_MS = 10000
#: On S3 roots: Kafka's default ``transaction.timeout.ms``. The fault proxy's latency spells
#: (0.3-3 s per request for 5-15 s) make one transaction's dozen requests take longer than
#: 10 s, so with the file:// timeout nearly every transaction timed out (0-1 commits a run).
S3_TXN_TIMEOUT_MS = 60000
#: Pause between a producer's sends (keeps several clients within a shared 2-core box).
SEND_GAP_S = 0.02

__all__ = ["EosWorkload", "QueueWorkload", "TxnWorkload", "count_eos_anomalies",
           "default_workloads", "extra_anomalies", "load_into_iceberg"]


class _Workload:
    """Shared bookkeeping: threads, a lock over the history, error counts."""

    name = "workload"
    #: The longest transaction timeout its clients use (the runner waits past it at the end).
    txn_timeout_s = TXN_TIMEOUT_MS / 1000

    def __init__(self, seed: int = 1, txn_timeout_ms: int = TXN_TIMEOUT_MS):
        self.seed = seed
        self.txn_timeout_ms = txn_timeout_ms
        self.txn_timeout_s = txn_timeout_ms / 1000
        self.topics: dict[str, int] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._acked: list = []
        self._polls: list = []
        self._commits: list = []
        self._committed_txns: dict = {}
        self._aborted_txns: dict = {}
        self._unknown_txns: dict = {}
        self._at_least_once: tuple = ()
        self._errors: Counter = Counter()
        # Every client outcome with the wall time it was seen (comparable with the brokers'
        # log lines and the records' timestamps): (time, kind, what, detail).
        self._events: list = []
        #: (consumer, topic, partition) (re)assigned and not read from since.
        self._starting: set = set()

    # -- the runner's interface --------------------------------------------------------------
    def start(self, bootstrap: str, stop: threading.Event) -> None:
        """Start every client thread."""
        # The Python clients log each refused connection while a broker is down; errors
        # they raise are counted in errors() instead.
        for name in ("aiokafka", "kafka"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self._threads = [threading.Thread(target=self._guard, args=(fn, name, bootstrap, stop),
                                          name=f"{self.name}-{name}", daemon=True)
                         for name, fn in self._clients()]
        for t in self._threads:
            t.start()

    def join(self, timeout: float) -> None:
        """Wait for the client threads (producers flush what they hold)."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            self._error("thread-not-joined", len(alive))

    def history(self) -> dict:
        """The checker's keys this workload knows (copies)."""
        with self._lock:
            return {"acked": list(self._acked), "polls": list(self._polls),
                    "commits": list(self._commits),
                    "committed_txns": dict(self._committed_txns),
                    "aborted_txns": dict(self._aborted_txns),
                    "at_least_once": tuple(self._at_least_once)}

    def errors(self) -> Counter:
        """Client errors seen, by kind (reported, not anomalies)."""
        with self._lock:
            return Counter(self._errors)

    def events(self) -> list:
        """Client outcomes stamped with the wall time they were seen, oldest first:
        ``(time, kind, what, detail)``; kind is ``ack`` (what: the value), ``txn-committed``
        / ``txn-aborted`` / ``txn-unknown`` (what: the transaction; detail: the errors met
        on the way, as the client named them, with the broker when the client names it),
        ``start`` (what: the consumer and partition; detail: the first offset it read after
        a (re)assignment), ``commit`` (what: the group; detail: the acknowledged offsets),
        or ``error``."""
        with self._lock:
            return sorted(self._events, key=lambda e: e[0])

    def unknown_txns(self) -> dict:
        """Transactions whose EndTxn outcome the client never learnt (in neither set)."""
        with self._lock:
            return dict(self._unknown_txns)

    # -- for the clients ---------------------------------------------------------------------
    def _clients(self) -> list:
        raise NotImplementedError

    def _guard(self, fn, name, bootstrap, stop) -> None:
        """Run a client loop, making the client again after an unexpected exception."""
        incarnation = 0
        while True:
            try:
                fn(bootstrap, stop, f"{name}#{incarnation}")
                return
            except Exception as e:   # noqa: BLE001 - a client thread must outlive faults
                self._error(f"{name}:{type(e).__name__}", detail=str(e))
                incarnation += 1
                if stop.is_set():
                    return
                time.sleep(1.0)

    def _one_txn(self, p, c, writes: dict, commit: bool) -> str:
        """One confluent-kafka transaction: ``writes``, the consumer's positions, then commit
        or abort; the outcome as the client saw it."""
        from confluent_kafka import KafkaException

        err = lambda kind, detail="": self._error(f"{self.txn_tag}:{kind}", detail=detail)   # noqa: E731
        try:
            p.begin_transaction()
            for (t, part), values in writes.items():
                for v in values:
                    p.produce(t, v.encode(), partition=part)
            positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
            if positions:
                p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 30)
        except KafkaException as e:
            e0 = e.args[0]
            err(f"txn:{_kafka_error_name(e0)}", _kafka_error_text(e0))
            if e0.fatal():
                return _TxnOutcome.UNKNOWN
            return _ck_end_txn(p, False, err)
        except Exception as e:   # noqa: BLE001 - e.g. BufferError: abort what was begun
            err(f"txn:{type(e).__name__}", str(e))
            return _ck_end_txn(p, False, err)
        outcome = _ck_end_txn(p, commit, err)
        if outcome == _TxnOutcome.COMMITTED and positions:
            self._commit(self.group, {(tp.topic, tp.partition): tp.offset for tp in positions})
        return outcome

    def _ck_group_consumer(self, bootstrap: str, who: str, tag: str, topic: str):
        """A read_committed confluent-kafka consumer of ``topic`` in this workload's group,
        marking (re)assignments as polls; with the error callback of a transactional
        producer beside it and the event that callback sets on a fatal error."""
        from confluent_kafka import Consumer

        fatal = threading.Event()

        def on_error(err):
            self._error(f"{tag}:{_kafka_error_name(err)}", detail=_kafka_error_text(err))
            if err.fatal():
                fatal.set()

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": self.group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": SESSION_TIMEOUT_MS,
                      "heartbeat.interval.ms": HEARTBEAT_MS,
                      "isolation.level": "read_committed", "log_level": 2})

        def on_assign(consumer, parts):
            for tp in parts:
                self._poll(who, tp.topic, tp.partition, None)

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_assign, on_lost=on_assign)
        return c, fatal, on_error

    def _error(self, kind: str, n: int = 1, detail: str = "") -> None:
        with self._lock:
            self._errors[kind] += n
            self._events.append((time.time(), "error", kind, detail))

    def _ack(self, value: str) -> None:
        with self._lock:
            self._acked.append(value)
            self._events.append((time.time(), "ack", value, ""))

    def _poll(self, consumer: str, topic: str, partition: int, offset) -> None:
        """A record ``consumer`` read, or None: a (re)assignment or revocation. The first
        record after one is an event (``start``, with the time): where the consumer started
        from, to match with the brokers' logs (the coordinator's OffsetFetch answers)."""
        with self._lock:
            self._polls.append((consumer, (topic, partition), offset))
            key = (consumer, topic, partition)
            if offset is None:
                self._starting.add(key)
            elif key in self._starting:
                self._starting.discard(key)
                self._events.append((time.time(), "start", f"{consumer} {topic}/{partition}",
                                     f"at {offset}"))

    def _commit(self, group: str, offsets: dict) -> None:
        with self._lock:
            self._commits += [(group, tp, o) for tp, o in offsets.items()]
            self._events.append((time.time(), "commit", group, " ".join(
                f"{t}/{p}={o}" for (t, p), o in sorted(offsets.items()))))

    def _record_txn(self, outcome: str, txn: str, writes: dict) -> None:
        """File ``writes`` (``{(topic, partition): [values]}``) under the transaction's
        outcome as the client saw it: committed, aborted or unknown (in neither set)."""
        with self._lock:
            {"committed": self._committed_txns, "aborted": self._aborted_txns,
             "unknown": self._unknown_txns}[outcome][txn] = writes
            self._events.append((time.time(), f"txn-{outcome}", txn, ""))


def _kafka_error_text(err) -> str:
    """A confluent-kafka KafkaError's text (librdkafka names the broker, e.g.
    ``127.0.0.1:39751/2``, when the error came from one)."""
    try:
        return err.str()
    except Exception:   # noqa: BLE001 - an exception that is not a KafkaError
        return str(err)


def _kafka_error_name(err) -> str:
    """A confluent-kafka KafkaError's name (``OUT_OF_ORDER_SEQUENCE_NUMBER``, ...)."""
    try:
        return err.name()
    except Exception:   # noqa: BLE001 - an exception that is not a KafkaError
        return type(err).__name__


# -- the queue --------------------------------------------------------------------------------
class QueueWorkload(_Workload):
    """A queue over ``partitions`` partitions: producers with and without idempotence from
    each client library (confluent-kafka idempotent and plain, aiokafka idempotent,
    kafka-python plain) and one consumer group per library (read_committed, offsets
    committed synchronously and recorded once acknowledged)."""

    name = "queue"

    def __init__(self, seed: int = 1, topic: str = "jq", partitions: int = 3):
        super().__init__(seed)
        self.topic = topic
        self.topics = {topic: partitions}
        # Producers without idempotence resend a batch whose answer was lost: at-least-once.
        self._at_least_once = (f"{self.name}-ck-plain-", f"{self.name}-kp-plain-")

    def _clients(self) -> list:
        return [("ck-idem", lambda b, s, n: self._ck_produce(b, s, n, True)),
                ("ck-plain", lambda b, s, n: self._ck_produce(b, s, n, False)),
                ("aio-idem", self._aio_produce),
                ("kp-plain", self._kp_produce),
                ("ck-consumer", self._ck_consume),
                ("aio-consumer", self._aio_consume),
                ("kp-consumer", self._kp_consume)]

    # -- confluent-kafka --
    def _ck_produce(self, bootstrap, stop, who, idempotent) -> None:
        from confluent_kafka import Producer

        fatal = threading.Event()

        def on_error(err):
            self._error(f"ck-producer:{_kafka_error_name(err)}")
            if err.fatal():
                fatal.set()

        def done(err, msg):
            if err is None:
                self._ack(msg.value().decode())
            else:
                self._error(f"ck-delivery:{_kafka_error_name(err)}")

        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": idempotent,
                      "acks": "all", "message.timeout.ms": MESSAGE_TIMEOUT_MS, "linger.ms": 5,
                      "error_cb": on_error, "log_level": 2})
        parts = self.topics[self.topic]
        prefix = f"{self.name}-{who.replace('#', '-')}-"   # e.g. queue-ck-idem-0-
        i = 0
        while not stop.is_set() and not fatal.is_set():
            try:
                p.produce(self.topic, f"{prefix}{i}".encode(), partition=i % parts,
                          on_delivery=done)
                i += 1
            except BufferError:
                pass
            p.poll(SEND_GAP_S)
        p.flush(MESSAGE_TIMEOUT_MS / 1000 + 30)
        if fatal.is_set() and not stop.is_set():
            raise RuntimeError("fatal producer error")   # the guard makes a new producer

    def _ck_consume(self, bootstrap, stop, who) -> None:
        from confluent_kafka import Consumer, TopicPartition

        group = f"{self.name}-ck"
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": SESSION_TIMEOUT_MS,
                      "heartbeat.interval.ms": HEARTBEAT_MS,
                      "isolation.level": "read_committed", "log_level": 2,
                      "error_cb": lambda err: self._error(f"ck-consumer:{_kafka_error_name(err)}")})

        def on_assign(consumer, parts):
            for tp in parts:
                self._poll(who, tp.topic, tp.partition, None)

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_assign, on_lost=on_assign)
        pending: dict = {}
        last_commit = time.monotonic()
        try:
            while not stop.is_set():
                msg = c.poll(0.2)
                if msg is not None and not msg.error():
                    self._poll(who, msg.topic(), msg.partition(), msg.offset())
                    pending[(msg.topic(), msg.partition())] = msg.offset() + 1
                if pending and time.monotonic() - last_commit >= 0.5:
                    todo, pending = pending, {}
                    last_commit = time.monotonic()
                    try:
                        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in todo.items()],
                                 asynchronous=False)
                        self._commit(group, todo)
                    except Exception as e:   # noqa: BLE001 - unacknowledged: nothing recorded
                        self._error(f"ck-commit:{_kafka_error_name(e.args[0] if e.args else e)}")
        finally:
            c.close()

    # -- kafka-python --
    def _kp_produce(self, bootstrap, stop, who) -> None:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all",
                          enable_idempotence=False, linger_ms=5,
                          request_timeout_ms=30000, delivery_timeout_ms=MESSAGE_TIMEOUT_MS,
                          max_block_ms=MESSAGE_TIMEOUT_MS)
        parts = self.topics[self.topic]
        prefix = f"{self.name}-{who.replace('#', '-')}-"
        i = 0

        def ok(value):
            return lambda _md: self._ack(value)

        def failed(e):
            self._error(f"kp-delivery:{type(e).__name__}")

        try:
            while not stop.is_set():
                value = f"{prefix}{i}"
                p.send(self.topic, value.encode(), partition=i % parts) \
                    .add_callback(ok(value)).add_errback(failed)
                i += 1
                time.sleep(SEND_GAP_S)
            p.flush(MESSAGE_TIMEOUT_MS / 1000 + 30)
        finally:
            p.close(timeout=10)

    def _kp_consume(self, bootstrap, stop, who) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.structs import OffsetAndMetadata, TopicPartition

        group = f"{self.name}-kp"
        wl = self

        class Marks(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                for tp in revoked:
                    wl._poll(who, tp.topic, tp.partition, None)

            def on_partitions_assigned(self, assigned):
                for tp in assigned:
                    wl._poll(who, tp.topic, tp.partition, None)

        c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=group,
                          enable_auto_commit=False, auto_offset_reset="earliest",
                          isolation_level="read_committed",
                          session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                          request_timeout_ms=30000)
        c.subscribe([self.topic], listener=Marks())
        last_commit = time.monotonic()
        pending: dict = {}
        try:
            while not stop.is_set():
                for tp, recs in c.poll(timeout_ms=200).items():
                    for r in recs:
                        self._poll(who, tp.topic, tp.partition, r.offset)
                        pending[(tp.topic, tp.partition)] = r.offset + 1
                if pending and time.monotonic() - last_commit >= 0.5:
                    todo, pending = pending, {}
                    last_commit = time.monotonic()
                    try:
                        c.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                                  for (t, p), o in todo.items()})
                        self._commit(group, todo)
                    except Exception as e:   # noqa: BLE001 - unacknowledged: nothing recorded
                        self._error(f"kp-commit:{type(e).__name__}")
        finally:
            c.close(autocommit=False)

    # -- aiokafka (its loop in this thread) --
    def _aio_produce(self, bootstrap, stop, who) -> None:
        asyncio.run(self._aio_produce_async(bootstrap, stop, who))

    async def _aio_produce_async(self, bootstrap, stop, who) -> None:
        from aiokafka import AIOKafkaProducer

        p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                             linger_ms=5, request_timeout_ms=30000)
        await p.start()
        parts = self.topics[self.topic]
        prefix = f"{self.name}-{who.replace('#', '-')}-"
        i = 0
        inflight: list = []

        async def settle(futs):
            for value, fut in futs:
                try:
                    await fut
                    self._ack(value)
                except Exception as e:   # noqa: BLE001 - not acknowledged
                    self._error(f"aio-delivery:{type(e).__name__}")

        try:
            while not stop.is_set():
                value = f"{prefix}{i}"
                try:
                    inflight.append((value, await p.send(self.topic, value.encode(),
                                                         partition=i % parts)))
                except Exception as e:   # noqa: BLE001 - not sent; counted
                    self._error(f"aio-send:{type(e).__name__}")
                    await asyncio.sleep(0.5)
                i += 1
                if len(inflight) >= 20:
                    await settle(inflight)
                    inflight = []
                await asyncio.sleep(SEND_GAP_S)
            await settle(inflight)
        finally:
            await p.stop()

    def _aio_consume(self, bootstrap, stop, who) -> None:
        asyncio.run(self._aio_consume_async(bootstrap, stop, who))

    async def _aio_consume_async(self, bootstrap, stop, who) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

        group = f"{self.name}-aio"
        wl = self

        class Marks(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                for tp in revoked:
                    wl._poll(who, tp.topic, tp.partition, None)

            async def on_partitions_assigned(self, assigned):
                for tp in assigned:
                    wl._poll(who, tp.topic, tp.partition, None)

        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level="read_committed",
                             session_timeout_ms=SESSION_TIMEOUT_MS,
                             heartbeat_interval_ms=HEARTBEAT_MS, request_timeout_ms=30000)
        c.subscribe([self.topic], listener=Marks())
        await c.start()
        last_commit = time.monotonic()
        pending: dict = {}
        try:
            while not stop.is_set():
                got = await c.getmany(timeout_ms=200)
                for tp, recs in got.items():
                    for r in recs:
                        self._poll(who, tp.topic, tp.partition, r.offset)
                        pending[(tp.topic, tp.partition)] = r.offset + 1
                if pending and time.monotonic() - last_commit >= 0.5:
                    todo, pending = pending, {}
                    last_commit = time.monotonic()
                    try:
                        await c.commit({TopicPartition(t, p): o for (t, p), o in todo.items()})
                        self._commit(group, todo)
                    except Exception as e:   # noqa: BLE001 - unacknowledged: nothing recorded
                        self._error(f"aio-commit:{type(e).__name__}")
        finally:
            await c.stop()


# -- transactions ---------------------------------------------------------------------------------
class _TxnOutcome:
    """How a confluent-kafka transaction ended, as the client saw it."""
    COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"


def _ck_txn_producer(bootstrap: str, txn_id: str, on_error, timeout_ms: int = TXN_TIMEOUT_MS):
    """A confluent-kafka transactional producer with its transactions initialised
    (``timeout_ms``: its transaction timeout, and its messages' one, which librdkafka wants
    no longer)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": timeout_ms, "acks": "all",
                  "message.timeout.ms": timeout_ms, "linger.ms": 5,
                  "error_cb": on_error, "log_level": 2})
    p.init_transactions(60)
    return p


def _ck_end_txn(p, commit: bool, record_error) -> str:
    """Commit (or abort) the open transaction of ``p`` the way the client documents it:
    retry a retriable error, abort after an abortable one; anything else (a fatal error,
    retries exhausted) leaves the outcome unknown and the producer must be made again.
    Returns a :class:`_TxnOutcome`."""
    from confluent_kafka import KafkaException

    for _attempt in range(3):
        try:
            if commit:
                p.commit_transaction(30)
                return _TxnOutcome.COMMITTED
            p.abort_transaction(30)
            return _TxnOutcome.ABORTED
        except KafkaException as e:
            err = e.args[0]
            record_error(f"{'commit' if commit else 'abort'}:{_kafka_error_name(err)}",
                         _kafka_error_text(err))
            if err.fatal():
                return _TxnOutcome.UNKNOWN
            if err.txn_requires_abort():
                commit = False     # the transaction cannot commit: abort it, then it is known
                continue
            if not err.retriable():
                return _TxnOutcome.UNKNOWN
    return _TxnOutcome.UNKNOWN


class TxnWorkload(_Workload):
    """Transactional appends across partitions of two topics: each transaction writes to
    2-4 partitions (both topics), sends a consumer group's offsets with
    ``send_offsets_to_transaction`` (the group reads topic A), and is committed or, at
    random, aborted. Outcomes are recorded as the client saw EndTxn answered; an unknown
    outcome (a fatal error, retries exhausted) goes in neither set (:meth:`unknown_txns`)."""

    name = "txn"

    txn_tag = "ck-txn"

    def __init__(self, seed: int = 1, topics: tuple = ("jt-a", "jt-b"), partitions: int = 2,
                 abort_ratio: float = 0.3, txn_timeout_ms: int = TXN_TIMEOUT_MS):
        super().__init__(seed, txn_timeout_ms)
        self.topic_a, self.topic_b = topics
        self.topics = {t: partitions for t in topics}
        self.group = f"{self.name}-g"
        self.abort_ratio = abort_ratio
        #: The aiokafka client's transactions so far, over all its incarnations: the offset
        #: it commits for its group is this count, which must never go back when the client
        #: is made again after an exception (a new incarnation starting at 0 would be read as
        #: the broker losing a committed offset).
        self._aio_txns = 0

    def _clients(self) -> list:
        return [("ck-txn", self._ck_txn), ("aio-txn", self._aio_txn)]

    def _ck_txn(self, bootstrap, stop, who) -> None:
        rng = random.Random(f"{self.seed}-{who}")
        c, fatal, on_error = self._ck_group_consumer(bootstrap, who, "ck-txn", self.topic_a)
        p = _ck_txn_producer(bootstrap, f"{self.name}-producer", on_error, self.txn_timeout_ms)
        all_parts = [(t, i) for t in (self.topic_a, self.topic_b) for i in range(self.topics[t])]
        n = 0
        try:
            while not stop.is_set():
                # Read what is there, so the offsets sent move on.
                for msg in c.consume(num_messages=50, timeout=0.1):
                    if not msg.error():
                        self._poll(who, msg.topic(), msg.partition(), msg.offset())
                parts = [(self.topic_a, rng.randrange(self.topics[self.topic_a])),
                         (self.topic_b, rng.randrange(self.topics[self.topic_b]))]
                parts += rng.sample([x for x in all_parts if x not in parts], rng.randrange(3))
                txn = f"{self.name}-{who.replace('#', '-')}-{n}"
                n += 1
                writes = {tp: [f"{txn}-{tp[0]}-{tp[1]}-{k}" for k in range(rng.randint(1, 3))]
                          for tp in parts}
                outcome = self._one_txn(p, c, writes, rng.random() >= self.abort_ratio)
                self._record_txn(outcome, txn, writes)
                if outcome == _TxnOutcome.UNKNOWN or fatal.is_set():
                    # The client's documented recovery: a new producer (same transactional
                    # id) whose InitProducerId fences the old one and ends its transaction.
                    p = None
                    fatal.clear()
                    p = _ck_txn_producer(bootstrap, f"{self.name}-producer", on_error, self.txn_timeout_ms)
                time.sleep(SEND_GAP_S * 5)
        finally:
            c.close()

    def _aio_txn(self, bootstrap, stop, who) -> None:
        asyncio.run(self._aio_txn_async(bootstrap, stop, who))

    async def _aio_txn_async(self, bootstrap, stop, who) -> None:
        """aiokafka's transactional producer: the same kind of transactions, with offsets
        of its own group (``txn-aio-g``, on topic A partition 0: the transaction's number,
        so a committed offset never goes back unless the broker loses one). An EndTxn
        that raised is an unknown outcome and the producer is made again."""
        from aiokafka import AIOKafkaProducer, TopicPartition

        rng = random.Random(f"{self.seed}-{who}")
        group = f"{self.name}-aio-g"
        all_parts = [(t, i) for t in (self.topic_a, self.topic_b) for i in range(self.topics[t])]
        p = None
        try:
            while not stop.is_set():
                if p is None:
                    p = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                         transactional_id=f"{self.name}-aio-producer",
                                         transaction_timeout_ms=self.txn_timeout_ms,
                                         request_timeout_ms=30000)
                    await p.start()
                parts = [(self.topic_a, rng.randrange(self.topics[self.topic_a])),
                         (self.topic_b, rng.randrange(self.topics[self.topic_b]))]
                parts += rng.sample([x for x in all_parts if x not in parts], rng.randrange(3))
                txn = f"{self.name}-{who.replace('#', '-')}-{self._aio_txns}"
                self._aio_txns += 1
                n = self._aio_txns
                writes = {tp: [f"{txn}-{tp[0]}-{tp[1]}-{k}" for k in range(rng.randint(1, 3))]
                          for tp in parts}
                commit = rng.random() >= self.abort_ratio
                offsets = {TopicPartition(self.topic_a, 0): n}
                outcome, ending = _TxnOutcome.UNKNOWN, False
                try:
                    await p.begin_transaction()
                    futs = [await p.send(t, v.encode(), partition=part)
                            for (t, part), vs in writes.items() for v in vs]
                    await p.send_offsets_to_transaction(offsets, group)
                    await asyncio.gather(*futs)
                    ending = True
                    if commit:
                        await p.commit_transaction()
                        outcome = _TxnOutcome.COMMITTED
                    else:
                        await p.abort_transaction()
                        outcome = _TxnOutcome.ABORTED
                except Exception as e:   # noqa: BLE001 - before EndTxn: abort; else unknown
                    self._error(f"aio-txn:{type(e).__name__}")
                    # An EndTxn that raised may have been applied: its outcome is unknown.
                    # A failure before it leaves the transaction uncommitted: abort it.
                    if not ending:
                        try:
                            await p.abort_transaction()
                            outcome = _TxnOutcome.ABORTED
                        except Exception as e2:   # noqa: BLE001 - unknown: a new producer
                            self._error(f"aio-txn-abort:{type(e2).__name__}")
                self._record_txn(outcome, txn, writes)
                if outcome == _TxnOutcome.COMMITTED:
                    self._commit(group, {(self.topic_a, 0): n})
                if outcome == _TxnOutcome.UNKNOWN:
                    try:
                        await p.stop()
                    except Exception:   # noqa: BLE001 - it is being replaced anyway
                        pass
                    p = None
                await asyncio.sleep(SEND_GAP_S * 5)
        finally:
            if p is not None:
                await p.stop()



# -- exactly-once consume-transform-produce -------------------------------------------------------
def _eos_value(topic: str, partition: int, offset: int, txn: str, value: str) -> str:
    """The output written for one input record: names the input (topic, partition, offset),
    the transaction (so a reprocessing after an abort writes a new, unique value) and the
    input value."""
    return f"eos|{topic}|{partition}|{offset}|{txn}|{value}"


def count_eos_anomalies(final_committed: dict, commits, group: str, output_topic: str) -> dict:
    """The exactly-once pipeline's properties over the final read_committed log:

    * ``eos-duplicate``: extra outputs of one input record (an input read and its output
      committed twice, e.g. offsets served from before a commit);
    * ``eos-missing-output``: input records below an offset the pipeline's group committed
      (acknowledged, in ``commits``) that have no output (offsets committed without the
      outputs of the same transaction).

    Pure: ``final_committed`` is ``{(topic, partition): [(offset, value)]}``, ``commits``
    the checker's ``[(group, (topic, partition), offset)]``."""
    outputs: Counter = Counter()
    for (t, _p), recs in final_committed.items():
        if t != output_topic:
            continue
        for _, v in recs:
            _, it, ip, ioff, _rest = str(v).split("|", 4)
            outputs[(it, int(ip), int(ioff))] += 1
    best: dict = {}
    for g, tp, off in commits:
        if g == group:
            best[tp] = max(off, best.get(tp, off))
    missing = sum(1 for tp, upto in best.items() for off, _ in final_committed.get(tp, ())
                  if off < upto and (tp[0], tp[1], off) not in outputs)
    return {"eos-duplicate": sum(n - 1 for n in outputs.values() if n > 1),
            "eos-missing-output": missing}


class EosWorkload(_Workload):
    """Exactly-once consume-transform-produce: a read_committed consumer (group
    ``eos-g``) reads ``input_topic`` (the queue's), a transactional producer writes one
    output per input record to ``output_topic`` and sends the consumer's offsets in the
    same transaction, then commits or, at random, aborts (and rewinds the consumer to its
    group's committed offsets, as the client docs say). :meth:`extra_anomalies` counts
    :func:`count_eos_anomalies` (not part of the checker: the runner adds them)."""

    name = "eos"

    txn_tag = "ck-eos"

    def __init__(self, seed: int = 1, input_topic: str = "jq", output_topic: str = "je-out",
                 partitions: int = 2, abort_ratio: float = 0.15,
                 txn_timeout_ms: int = TXN_TIMEOUT_MS):
        super().__init__(seed, txn_timeout_ms)
        self.input_topic, self.output_topic = input_topic, output_topic
        self.topics = {output_topic: partitions}   # the input is another workload's
        self.group = f"{self.name}-g"
        self.abort_ratio = abort_ratio

    def extra_anomalies(self, final_committed: dict) -> dict:
        """``eos-duplicate`` and ``eos-missing-output`` over the final read_committed log."""
        return count_eos_anomalies(final_committed, self.history()["commits"], self.group,
                                   self.output_topic)

    def _clients(self) -> list:
        return [("ck-eos", self._ck_eos)]

    def _ck_eos(self, bootstrap, stop, who) -> None:
        rng = random.Random(f"{self.seed}-{who}")
        c, fatal, on_error = self._ck_group_consumer(bootstrap, who, "ck-eos", self.input_topic)
        p = _ck_txn_producer(bootstrap, f"{self.name}-producer", on_error, self.txn_timeout_ms)
        parts = self.topics[self.output_topic]
        n = 0
        try:
            while not stop.is_set():
                msgs = [m for m in c.consume(num_messages=50, timeout=0.3) if not m.error()]
                if not msgs:
                    continue
                txn = f"{self.name}-{who.replace('#', '-')}-{n}"
                n += 1
                writes: dict = {}
                for m in msgs:
                    self._poll(who, m.topic(), m.partition(), m.offset())
                    out = _eos_value(m.topic(), m.partition(), m.offset(), txn,
                                     m.value().decode())
                    writes.setdefault((self.output_topic, m.partition() % parts), []).append(out)
                outcome = self._one_txn(p, c, writes, rng.random() >= self.abort_ratio)
                self._record_txn(outcome, txn, writes)
                if outcome != _TxnOutcome.COMMITTED:
                    self._rewind(c, who)
                if outcome == _TxnOutcome.UNKNOWN or fatal.is_set():
                    fatal.clear()
                    p = None
                    p = _ck_txn_producer(bootstrap, f"{self.name}-producer", on_error, self.txn_timeout_ms)
        finally:
            c.close()

    def _rewind(self, c, who) -> None:
        """Seek every assigned partition back to the group's committed offset (what the
        aborted transaction read is read again); a failure makes the client again."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        for tp in c.committed(c.assignment(), timeout=30):
            self._poll(who, tp.topic, tp.partition, None)
            c.seek(TopicPartition(tp.topic, tp.partition,
                                  tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))


# -- load into Iceberg over the result ---------------------------------------------------------------
def load_into_iceberg(root: str, topic: str, workdir: str, *, storage_options: dict | None = None,
                      spark=None, table: str = "jepsen_load") -> dict:
    """After a run: load ``topic`` of ``root`` into a table of a pyiceberg SQLite catalog
    (warehouse under ``workdir``) with local Spark, and compare the table with the
    read_committed log. Returns ``{"iceberg-rows": n, "iceberg-mismatch": m}``, ``m``
    the (partition, offset, value) triples in one and not the other (0 when the loaded
    table equals the log). Slow (Spark starts): for the long run's end, not CI's short
    schedule. ``spark``: a session to use (else one in local mode, stopped after)."""
    import os

    from kafkastore.read.reader import EARLIEST, PartitionReader
    from kafkastore.storage import Storage
    from kafkastore.topics.admin import load_topic
    from pipelines.warehouse.catalog import Warehouse
    from pipelines.warehouse.reads import read_arrow
    from pipelines.jobs.load import run_load

    own = spark is None
    if own:
        from pipelines.source.session import get_spark

        spark = get_spark(master="local[2]", app_name="jepsen-load")
    os.makedirs(workdir, exist_ok=True)
    wh = Warehouse(f"file://{workdir}/warehouse",
                       {"type": "sql", "uri": f"sqlite:///{workdir}/catalog.db"})
    try:
        run_load(spark, root=root, topic=topic, warehouse=wh, table=table,
                 storage_options=storage_options, progress=False)
    finally:
        if own:
            spark.stop()
    rows = read_arrow(wh.table(table), columns=["partition", "offset", "value"]).to_pylist()
    loaded = Counter((r["partition"], r["offset"], bytes(r["value"])) for r in rows)
    storage = Storage(root, storage_options)
    log: Counter = Counter()
    for part in range(load_topic(storage, topic).partitions):
        tab = PartitionReader(storage, topic, part).read(EARLIEST, isolation="read_committed")
        log.update((part, o, bytes(v)) for o, v in zip(tab.column("offset").to_pylist(),
                                                        tab.column("value").to_pylist()))
    return {"iceberg-rows": sum(loaded.values()),
            "iceberg-mismatch": sum(((loaded - log) + (log - loaded)).values())}


# -- the set the runner runs -----------------------------------------------------------------------
def default_workloads(seed: int, txn_timeout_ms: int = TXN_TIMEOUT_MS) -> list:
    """The mixed set of workloads for a run with ``seed`` (``txn_timeout_ms``: the
    transactional clients' timeout, :data:`S3_TXN_TIMEOUT_MS` on S3 roots)."""
    queue = QueueWorkload(seed)
    return [queue, TxnWorkload(seed, txn_timeout_ms=txn_timeout_ms),
            EosWorkload(seed, input_topic=queue.topic, txn_timeout_ms=txn_timeout_ms)]


def extra_anomalies(workloads: list, final_committed: dict) -> dict:
    """Anomaly counts the checker does not know, summed over the workloads that have
    ``extra_anomalies(final_committed)`` (``{name: count}``; every name always present)."""
    out: Counter = Counter()
    for w in workloads:
        fn = getattr(w, "extra_anomalies", None)
        if fn is not None:
            out.update(fn(final_committed))
    return dict(out)
