"""SASL authentication (SaslHandshake + SaslAuthenticate): PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

SCRAM users come from the root (``kafkastore users``, AlterUserScramCredentials: salted
credentials every broker shares, :mod:`kafkastore.scram_users`, re-read within about two
seconds of a change) and from a file of ``user:password`` lines (``--sasl-credentials``).
When both name a user, the root's credential for that mechanism wins (so a password
changed over the admin API takes effect); the file's password serves a user and mechanism
the root has no credential for. PLAIN checks the file only (the root holds no passwords).
A connection must authenticate before any API but ApiVersions, SaslHandshake
and SaslAuthenticate; a failed authentication is answered with
SASL_AUTHENTICATION_FAILED and the connection is closed after the response. Failures count
against the client's address (``ServeOptions.sasl_max_failed_logins_per_ip`` in
``sasl_failed_login_window_ms``); past them its logins are refused before any check and its
new connections closed at accept, so guessing passwords costs the broker next to nothing.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

from ...errors import CommitConflict, ConfigError, KafkaStoreError, ObjectNotFoundError
from ...cluster.scram import (MECHANISMS as SCRAM_MECHANISMS, STALE, ScramCredential,
                              credential_from_password)
from ..wire import error_codes as E
from ..wire.api_keys import SASL_AUTHENTICATE, SASL_HANDSHAKE
from .users import scram_users
from ..wire.codec import make
from ..handler_table import HandlerTable, RequestContext

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_ITERATIONS = 4096


def load_credentials(path: str) -> dict[str, str]:
    """``user:password`` per line (``#`` comments); :class:`ConfigError` if none or malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read SASL credentials file {path}: {exc}") from None
    users = {}
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user:
            raise ConfigError(f"{path}:{n}: expected user:password")
        users[user] = password
    if not users:
        raise ConfigError(f"SASL credentials file {path} lists no users")
    return users


async def handle_handshake(ctx: RequestContext, request):
    conn = ctx.connection
    if conn.authenticated:
        # A logged-in connection keeps its principal: no second login on it (Kafka answers
        # ILLEGAL_SASL_STATE; its re-authentication, which this broker does not offer with a
        # session lifetime of 0, must keep the principal too).
        return make(ctx.response_class, error_code=E.ILLEGAL_SASL_STATE, mechanisms=MECHANISMS)
    mech = request.mechanism
    if mech not in MECHANISMS:
        return make(ctx.response_class, error_code=E.UNSUPPORTED_SASL_MECHANISM, mechanisms=MECHANISMS)
    conn.sasl_state = {"mechanism": mech, "step": 0}
    return make(ctx.response_class, error_code=E.NONE, mechanisms=MECHANISMS)


def _peer_ip(ctx) -> str:
    peer = getattr(ctx.connection, "peer", None)
    return str(peer[0]) if isinstance(peer, (tuple, list)) and peer else str(peer)


def _fail(ctx, message: str):
    """Refuse the login and close the connection after the answer; the failure counts
    against the client's address (past its budget it is refused unchecked)."""
    failed_logins = ctx.broker.failed_logins
    if failed_logins is not None:
        failed_logins.failed(_peer_ip(ctx))
    ctx.connection.sasl_state = {"failed": True}
    ctx.connection.close_after_response = True
    return make(ctx.response_class, error_code=E.SASL_AUTHENTICATION_FAILED, error_message=message,
                auth_bytes=b"", session_lifetime=0)


def _ok(ctx, data: bytes = b""):
    return make(ctx.response_class, error_code=E.NONE, error_message=None, auth_bytes=data,
                session_lifetime=0)


async def _file_credential(ctx, user: str, mechanism: str, password: str, salt: bytes,
                           iterations: int) -> ScramCredential:
    """The keys of a ``--sasl-credentials`` user: PBKDF2 once per user and mechanism for the
    broker's life (the salt shown for a name is fixed), in the thread pool."""
    cache = ctx.broker.services.scram_file_keys
    key = (user, mechanism, salt, iterations)
    cred = cache.get(key)
    if cred is None:
        cred = cache[key] = await ctx.run(
            lambda: credential_from_password(mechanism, password, iterations=iterations, salt=salt))
    return cred


def _fake_credential(secret: bytes, user: str, algo: str) -> ScramCredential:
    """Keys no password gives (unknown users): fixed per name, derived from the broker's secret."""
    name = user.encode("utf-8", "surrogatepass")
    return ScramCredential(b"", _SCRAM_ITERATIONS, hmac.new(secret, b"scram-stored:" + name, algo).digest(),
                           hmac.new(secret, b"scram-server:" + name, algo).digest())


def _credential(broker, user: str, mechanism: str) -> ScramCredential | None:
    """The root's credential of ``user`` for ``mechanism``, None if it has none. Blocking (a
    cached read of the shared document)."""
    try:
        return scram_users(broker).lookup(user, mechanism)
    except KafkaStoreError as exc:  # the root unreadable: the file's users still log in
        import logging
        logging.getLogger("kafkastore.serve").warning("cannot read SCRAM users: %s", exc)
        return None


def _fake_salt(secret: bytes, user: str) -> bytes:
    """The salt SCRAM shows for ``user``: fixed per user name for this broker's life, for known
    and unknown users alike, so the server-first message tells nobody whether a user exists
    (Kafka's ScramSaslServer answers unknown users with made-up credentials too)."""
    # 32 bytes, as the salts `kafkastore users add` stores for real users.
    return hmac.new(secret, b"scram-salt:" + user.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


#: The root's secret the made-up SCRAM salts and keys of unknown users derive from: one for
#: every broker of the root, so an unknown name gets the same salt from each of them, as a
#: real user does (a per-broker secret would tell them apart).
SCRAM_SECRET_PATH = "_cluster/_scram-secret"


def _root_secret(storage) -> bytes:
    """The root's SCRAM secret, created once with put-if-absent (blocking)."""

    try:
        return storage.get(SCRAM_SECRET_PATH)
    except ObjectNotFoundError:
        pass
    try:
        storage.put_if_absent(SCRAM_SECRET_PATH, os.urandom(32))
    except CommitConflict:
        pass  # another broker made it first: use theirs
    return storage.get(SCRAM_SECRET_PATH)


def _scram_secret(broker) -> bytes:
    secret = broker.services.scram_secret
    if secret is None:
        try:
            secret = _root_secret(broker.storage)
        except KafkaStoreError as exc:  # the root unreadable: this broker's own, for now
            import logging
            logging.getLogger("kafkastore.serve").warning("cannot read the SCRAM secret: %s", exc)
            return os.urandom(32)
        broker.services.scram_secret = secret
    return secret


def _parse_client_first(text: str) -> tuple[str, str, str, str] | None:
    """``(gs2 header, bare message, user, client nonce)`` of a SCRAM client-first message, None
    if malformed (RFC 5802: ``n,[a=authzid],n=user,r=nonce[,...]``; no channel binding)."""
    parts = text.split(",", 2)
    if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
        return None
    bare = parts[2]
    fields = dict(kv.split("=", 1) for kv in bare.split(",") if "=" in kv)
    user = fields.get("n", "").replace("=2C", ",").replace("=3D", "=")
    cnonce = fields.get("r", "")
    if not user or not cnonce or not bare.startswith("n="):
        return None
    authzid = parts[1][2:].replace("=2C", ",").replace("=3D", "=")
    if authzid and authzid != user:
        return None
    return parts[0] + "," + parts[1] + ",", bare, user, cnonce


async def handle_authenticate(ctx: RequestContext, request):
    """One SaslAuthenticate step; a malformed message is an authentication failure, never an
    exception (the connection is closed after the answer)."""
    try:
        return await _authenticate(ctx, request)
    except (ValueError, KeyError, IndexError, TypeError, UnicodeError):
        return _fail(ctx, "malformed SASL message")


async def _authenticate(ctx: RequestContext, request):
    conn = ctx.connection
    if conn.authenticated:
        return make(ctx.response_class, error_code=E.ILLEGAL_SASL_STATE,
                    error_message="already authenticated", auth_bytes=b"", session_lifetime=0)
    state = conn.sasl_state
    users = ctx.broker.options.credentials or {}
    mech = state.get("mechanism")
    failed_logins = ctx.broker.failed_logins
    wait = failed_logins.retry_after(_peer_ip(ctx)) if failed_logins is not None else 0
    if wait:
        # Over the address's failed-login budget: refused before any check (not counted again).
        conn.sasl_state = {"failed": True}
        conn.close_after_response = True
        return make(ctx.response_class, error_code=E.SASL_AUTHENTICATION_FAILED,
                    error_message=f"too many failed logins from this address; retry in {wait} s",
                    auth_bytes=b"", session_lifetime=0)
    data = bytes(request.auth_bytes)
    if mech == "PLAIN":
        parts = data.split(b"\x00")
        if len(parts) != 3:
            return _fail(ctx, "malformed PLAIN message")
        authzid = parts[0].decode("utf-8", "replace")
        user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        expected = users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            return _fail(ctx, "authentication failed: bad user name or password")
        if authzid and authzid != user:  # as Kafka's PlainSaslServer: no acting as someone else
            return _fail(ctx, "authentication failed: client requested an authorization id that "
                              "is different from the user name")
        conn.principal, conn.authenticated = user, True
        return _ok(ctx)
    if mech in SCRAM_MECHANISMS:
        algo = SCRAM_MECHANISMS[mech][0]
        if state.get("step") == 0:
            parsed = _parse_client_first(data.decode("utf-8", "replace"))
            if parsed is None:
                return _fail(ctx, "malformed SCRAM client-first message")
            gs2, bare, user, cnonce = parsed
            if ctx.broker.services.scram_secret is None:
                await ctx.run(_scram_secret, ctx.broker)   # once per broker: read in the pool
            stored = scram_users(ctx.broker).cached_lookup(user, mech)
            if stored is STALE:  # re-read the root's users in the thread pool (every ~2 s)
                stored = await ctx.run(_credential, ctx.broker, user, mech)
            if stored is not None:
                salt, iterations = stored.salt, stored.iterations
            else:
                salt, iterations = _fake_salt(_scram_secret(ctx.broker), user), _SCRAM_ITERATIONS
            nonce = cnonce + secrets.token_urlsafe(18)
            server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"
            # Unknown users go on to the final step like known ones and fail there, the same way.
            conn.sasl_state = {"mechanism": mech, "step": 1, "user": user, "salt": salt,
                               "iterations": iterations, "stored": stored,
                               "nonce": nonce, "auth": bare + "," + server_first, "gs2": gs2}
            return _ok(ctx, server_first.encode())
        if state.get("step") == 1:
            text = data.decode("utf-8", "replace")
            fields = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
            without_proof = text.rsplit(",p=", 1)[0]
            if fields.get("r") != state["nonce"] or "p" not in fields:
                return _fail(ctx, "authentication failed: bad SCRAM nonce")
            cred: ScramCredential | None = state["stored"]
            known = cred is not None or state["user"] in users
            if cred is None and known:
                cred = await _file_credential(ctx, state["user"], mech, users[state["user"]],
                                              state["salt"], state["iterations"])
            elif cred is None:
                # An unknown user is checked against made-up keys: it fails like a wrong password,
                # in about the same time as a known user (no PBKDF2 for an attacker to make us run).
                cred = _fake_credential(_scram_secret(ctx.broker), state["user"], algo)
            stored_key, server_key = cred.stored_key, cred.server_key
            auth_message = (state["auth"] + "," + without_proof).encode()
            signature = hmac.new(stored_key, auth_message, algo).digest()
            try:
                proof = base64.b64decode(fields["p"], validate=True)
            except ValueError:
                return _fail(ctx, "malformed SCRAM proof")
            client_key = bytes(a ^ b for a, b in zip(proof, signature))
            if (not known or len(proof) != len(signature)
                    or not hmac.compare_digest(hashlib.new(algo, client_key).digest(), stored_key)):
                return _fail(ctx, "authentication failed: bad user name or password")
            server_sig = hmac.new(server_key, auth_message, algo).digest()
            conn.principal, conn.authenticated = state["user"], True
            conn.sasl_state = {"mechanism": mech, "step": 2}
            return _ok(ctx, b"v=" + base64.b64encode(server_sig))
    return _fail(ctx, "SaslAuthenticate without a SaslHandshake")


def register(registry: HandlerTable) -> None:
    registry.serve(SASL_HANDSHAKE, handle_handshake)
    registry.serve(SASL_AUTHENTICATE, handle_authenticate)
