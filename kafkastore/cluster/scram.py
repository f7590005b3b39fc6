"""SCRAM users: salted credentials every broker of a root shares (KIP-554).

Stored as Kafka stores them, never the password: per user and mechanism the salt, the
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key") (RFC 5802), in the cluster document ``scram``
(:class:`kafkastore.cluster.documents.ClusterDocument`)::

    {"users": {"alice": {"SCRAM-SHA-256": {"salt": b64, "iterations": 4096,
                                           "stored_key": b64, "server_key": b64}}}}

AlterUserScramCredentials sends what a client derived from the password (salt, iterations,
SaltedPassword); ``kafkastore users add`` derives the same from a password it is given.
Changes go through :meth:`ScramUsers.alter`, which applies Kafka's rules per user and
commits every accepted change in one version of the document.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from ..clock import Clock
from .documents import ClusterDocument
from ..errors import ScramCredentialError
from ..storage import Storage

DOCUMENT = "scram"
#: Kafka's ScramMechanism: name -> (hash, wire code).
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_CODE = {code: name for name, (_, code) in MECHANISMS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's ScramMechanism bounds
DEFAULT_ITERATIONS = 4096
MAX_USER_NAME = 255


@dataclass(frozen=True)
class ScramCredential:
    """One user's credential for one mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_dict(self) -> dict:
        """JSON-ready form (bytes as base64)."""
        enc = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return {"salt": enc(self.salt), "iterations": self.iterations,
                "stored_key": enc(self.stored_key), "server_key": enc(self.server_key)}

    @classmethod
    def from_dict(cls, d: dict) -> "ScramCredential":
        """Inverse of :meth:`to_dict`."""
        dec = base64.b64decode
        return cls(dec(d["salt"]), int(d["iterations"]), dec(d["stored_key"]), dec(d["server_key"]))


def check_mechanism(mechanism: str) -> str:
    """``mechanism`` if it is SCRAM-SHA-256 or SCRAM-SHA-512, else :class:`ScramCredentialError`."""
    if mechanism not in MECHANISMS:
        raise ScramCredentialError(f"unknown SCRAM mechanism {mechanism!r}: expected one of "
                                   f"{', '.join(MECHANISMS)}", kind="mechanism")
    return mechanism


def check_user_name(name: str) -> str:
    """``name`` if it can be a SCRAM user: not empty, at most 255 characters, no control
    characters (they could not be typed at a login or shown in a listing)."""
    if not isinstance(name, str) or not name:
        raise ScramCredentialError("user name must not be empty")
    if len(name) > MAX_USER_NAME:
        raise ScramCredentialError(f"user name is {len(name)} characters long, more than {MAX_USER_NAME}")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ScramCredentialError(f"user name {name!r} contains control characters")
    return name


def check_iterations(iterations: int) -> int:
    """``iterations`` if within Kafka's 4096..16384, else :class:`ScramCredentialError`."""
    if not isinstance(iterations, int) or isinstance(iterations, bool):
        raise ScramCredentialError(f"iterations must be an integer, got {iterations!r}")
    if iterations < MIN_ITERATIONS:
        raise ScramCredentialError(f"too few iterations: {iterations} (at least {MIN_ITERATIONS})")
    if iterations > MAX_ITERATIONS:
        raise ScramCredentialError(f"too many iterations: {iterations} (at most {MAX_ITERATIONS})")
    return iterations


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword = Hi(password, salt, iterations) (PBKDF2-HMAC)."""
    algo = MECHANISMS[check_mechanism(mechanism)][0]
    return hashlib.pbkdf2_hmac(algo, password.encode("utf-8"), salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    """The stored form of a credential from its SaltedPassword (what AlterUserScramCredentials
    carries). Pure."""
    algo = MECHANISMS[check_mechanism(mechanism)][0]
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    server_key = hmac.new(salted, b"Server Key", algo).digest()
    return ScramCredential(bytes(salt), iterations, hashlib.new(algo, client_key).digest(), server_key)


def credential_from_password(mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    """A new credential for ``password`` (a random 32-byte salt unless given)."""
    check_iterations(iterations)
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(mechanism, salt, iterations,
                                  salted_password(mechanism, password, salt, iterations))


@dataclass(frozen=True)
class Upsertion:
    """Set ``user``'s credential for ``mechanism`` (a mechanism name, or Kafka's wire code)."""

    user: str
    mechanism: str | int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True)
class Deletion:
    """Remove ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str | int


def _mechanism_name(m: str | int) -> str:
    if isinstance(m, int) and not isinstance(m, bool):
        if m not in MECHANISM_BY_CODE:
            raise ScramCredentialError(f"unknown SCRAM mechanism {m}", kind="mechanism")
        return MECHANISM_BY_CODE[m]
    return check_mechanism(m)


def plan_alter(doc: dict, deletions: Iterable[Deletion], upsertions: Iterable[Upsertion]
               ) -> tuple[dict, dict[str, ScramCredentialError | None]]:
    """``(new document, {user: error or None})`` of applying a request to ``doc``, by Kafka's
    rules: a user any of whose changes is refused is left as it was; a (user, mechanism)
    named twice is DUPLICATE_RESOURCE; deleting a credential that is not there is
    RESOURCE_NOT_FOUND. Pure (``doc`` is not changed)."""
    deletions, upsertions = list(deletions), list(upsertions)
    errors: dict[str, ScramCredentialError | None] = {}
    seen: dict[tuple[str, object], int] = {}
    for op in deletions + upsertions:
        errors.setdefault(op.user, None)
        seen[(op.user, op.mechanism)] = seen.get((op.user, op.mechanism), 0) + 1

    def refuse(user: str, exc: ScramCredentialError) -> None:
        if errors.get(user) is None:
            errors[user] = exc

    for (user, _), n in seen.items():
        if n > 1:
            refuse(user, ScramCredentialError("a user credential cannot be altered twice in the same "
                                              "request", kind="duplicate"))
    users = {u: dict(creds) for u, creds in doc.get("users", {}).items()}
    changed: dict[str, dict] = {}
    for op in deletions + upsertions:
        if errors[op.user] is not None:
            continue
        try:
            check_user_name(op.user)
            mech = _mechanism_name(op.mechanism)
            creds = changed.setdefault(op.user, dict(users.get(op.user, {})))
            if isinstance(op, Deletion):
                if mech not in creds:
                    raise ScramCredentialError(f"user {op.user!r} has no {mech} credential to delete",
                                               kind="not_found")
                del creds[mech]
            else:
                check_iterations(op.iterations)
                if not op.salt:
                    raise ScramCredentialError("salt must not be empty")
                if not op.salted_password:
                    raise ScramCredentialError("salted password must not be empty")
                creds[mech] = credential_from_salted(mech, op.salt, op.iterations,
                                                     op.salted_password).to_dict()
        except ScramCredentialError as exc:
            refuse(op.user, exc)
    accepted = [u for u in changed if errors[u] is None]
    if not accepted:
        return doc, errors
    for user in accepted:
        if changed[user]:
            users[user] = changed[user]
        else:
            users.pop(user, None)
    return {**doc, "users": dict(sorted(users.items()))}, errors


STALE = object()  # cached_lookup's "read the root first"


class ScramUsers:
    """The root's SCRAM users (the ``scram`` cluster document), cached for ``max_age_s``."""

    def __init__(self, storage: Storage, *, max_age_s: float = 2.0,
                 clock: Clock | Callable[[], float] | None = None):
        self.document = ClusterDocument(storage, DOCUMENT, max_age_s=max_age_s, clock=clock)
        self.max_age_s = max_age_s
        self._clock = self.document._clock  # the document's (default: the storage's)
        #: ``(read at, version, {(user, mechanism): credential})``: parsed once per version, so a
        #: login costs a dict lookup, not a copy of the document.
        self._parsed: tuple[float, int, dict] | None = None
        self._reload_lock = threading.Lock()

    def describe(self, fresh: bool = False) -> dict[str, dict[str, int]]:
        """``{user: {mechanism: iterations}}`` of every user (``fresh``: read the root now)."""
        doc = self.document.refresh() if fresh else self.document.get()
        return {u: {m: int(c["iterations"]) for m, c in sorted(creds.items())}
                for u, creds in sorted(doc.get("users", {}).items())}

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism``, None if there is none; the root is re-read
        when the credentials in hand are older than ``max_age_s``. Blocking then."""
        parsed = self._parsed
        if parsed is None or self._clock.monotonic_s() - parsed[0] >= self.max_age_s:
            parsed = self.reload()
        return parsed[2].get((user, mechanism))

    def reload(self) -> tuple[float, int, dict]:
        """Read the root's users now (one request when unchanged) and keep them; what is kept
        (``(read at, version, credentials)``). Reloads may overlap (a refresher starts the
        next before a slow one ends): the newest version and the latest read time win."""
        at = self._clock.monotonic_s()
        version, doc, _ = self.document.read()
        with self._reload_lock:
            parsed = self._parsed
            if parsed is not None and version <= parsed[1]:
                # An older or equal version read at ``at``: the one in hand was current then.
                self._parsed = parsed = (max(at, parsed[0]), parsed[1], parsed[2])
                return parsed
            creds = {(u, m): ScramCredential.from_dict(c)
                     for u, by_mech in doc.get("users", {}).items() for m, c in by_mech.items()}
            self._parsed = parsed = (at, version, creds)
            return parsed

    def cached_lookup(self, user: str, mechanism: str):
        """:meth:`lookup` if the credentials in hand are fresh (never blocks), else
        :data:`STALE`."""
        parsed = self._parsed
        if parsed is None or self._clock.monotonic_s() - parsed[0] >= self.max_age_s:
            return STALE
        return parsed[2].get((user, mechanism))

    def alter(self, deletions: Iterable[Deletion] = (), upsertions: Iterable[Upsertion] = ()
              ) -> dict[str, ScramCredentialError | None]:
        """Apply one request (:func:`plan_alter`) as one committed version; ``{user: error}``
        (None: changed). The rules are re-checked against the head on a lost race."""
        deletions, upsertions = list(deletions), list(upsertions)
        outcome: dict = {}

        def change(doc: dict) -> dict:
            new, errors = plan_alter(doc, deletions, upsertions)
            outcome.clear()
            outcome.update(errors)
            return new

        self.document.update(change)
        self._parsed = None  # this broker sees its own change at once
        return dict(outcome)

    def add(self, user: str, mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS) -> None:
        """Set ``user``'s ``mechanism`` credential to ``password`` (created or replaced)."""
        check_user_name(user)
        check_iterations(iterations)
        salt = os.urandom(32)
        up = Upsertion(user, check_mechanism(mechanism), iterations, salt,
                       salted_password(mechanism, password, salt, iterations))
        err = self.alter(upsertions=[up]).get(user)
        if err is not None:
            raise err

    def remove(self, user: str, mechanism: str | None = None) -> list[str]:
        """Remove ``user``'s credential for ``mechanism`` (every one if None); the mechanisms
        removed. :class:`ScramCredentialError` (``not_found``) if there was none."""
        have = self.describe(fresh=True).get(user, {})
        mechs = [check_mechanism(mechanism)] if mechanism else sorted(have)
        if not mechs:
            raise ScramCredentialError(f"no SCRAM user {user!r}", kind="not_found")
        err = self.alter(deletions=[Deletion(user, m) for m in mechs]).get(user)
        if err is not None:
            raise err
        return mechs
