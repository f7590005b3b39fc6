"""SASL authentication (SaslHandshake + SaslAuthenticate): PLAIN and SCRAM-SHA-256.

Credentials come from a file of ``user:password`` lines (``--sasl-credentials``).
A connection must authenticate before any API but ApiVersions, SaslHandshake
and SaslAuthenticate; a failed authentication is answered with
SASL_AUTHENTICATION_FAILED and the connection is closed after the response.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

from ..errors import ConfigError
from . import error_codes as E
from .codec import make
from .registry import Registry, RequestContext

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
MECHANISMS = ("PLAIN", "SCRAM-SHA-256")
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
    mech = request.mechanism
    if mech not in MECHANISMS:
        return make(ctx.response_class, error_code=E.UNSUPPORTED_SASL_MECHANISM, mechanisms=MECHANISMS)
    conn.sasl_state = {"mechanism": mech, "step": 0}
    return make(ctx.response_class, error_code=E.NONE, mechanisms=MECHANISMS)


def _fail(ctx, message: str):
    ctx.connection.sasl_state = {"failed": True}
    ctx.connection.close_after_response = True
    return make(ctx.response_class, error_code=E.SASL_AUTHENTICATION_FAILED, error_message=message,
                auth_bytes=b"", session_lifetime=0)


def _ok(ctx, data: bytes = b""):
    return make(ctx.response_class, error_code=E.NONE, error_message=None, auth_bytes=data,
                session_lifetime=0)


def _scram_keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    return hashlib.sha256(client_key).digest(), server_key


def _fake_salt(secret: bytes, user: str) -> bytes:
    """The salt SCRAM shows for ``user``: fixed per user name for this broker's life, for known
    and unknown users alike, so the server-first message tells nobody whether a user exists
    (Kafka's ScramSaslServer answers unknown users with made-up credentials too)."""
    return hmac.new(secret, b"scram-salt:" + user.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()[:16]


def _scram_secret(broker) -> bytes:
    secret = getattr(broker, "_scram_secret", None)
    if secret is None:
        secret = broker._scram_secret = os.urandom(32)
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
    state = conn.sasl_state
    users = ctx.broker.options.credentials or {}
    mech = state.get("mechanism")
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
    if mech == "SCRAM-SHA-256":
        if state.get("step") == 0:
            parsed = _parse_client_first(data.decode("utf-8", "replace"))
            if parsed is None:
                return _fail(ctx, "malformed SCRAM client-first message")
            gs2, bare, user, cnonce = parsed
            salt = _fake_salt(_scram_secret(ctx.broker), user)
            nonce = cnonce + secrets.token_urlsafe(18)
            server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={_SCRAM_ITERATIONS}"
            # Unknown users go on to the final step like known ones and fail there, the same way.
            conn.sasl_state = {"mechanism": mech, "step": 1, "user": user, "salt": salt,
                               "nonce": nonce, "auth": bare + "," + server_first, "gs2": gs2}
            return _ok(ctx, server_first.encode())
        if state.get("step") == 1:
            text = data.decode("utf-8", "replace")
            fields = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
            without_proof = text.rsplit(",p=", 1)[0]
            if fields.get("r") != state["nonce"] or "p" not in fields:
                return _fail(ctx, "authentication failed: bad SCRAM nonce")
            password = users.get(state["user"])
            # An unknown user is checked against a random password: same work, same answer.
            # PBKDF2 (4096 rounds) in the thread pool: many logins must not stall the event loop.
            stored_key, server_key = await ctx.run(
                _scram_keys, password if password is not None else secrets.token_hex(16),
                state["salt"], _SCRAM_ITERATIONS)
            auth_message = (state["auth"] + "," + without_proof).encode()
            signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
            try:
                proof = base64.b64decode(fields["p"], validate=True)
            except ValueError:
                return _fail(ctx, "malformed SCRAM proof")
            client_key = bytes(a ^ b for a, b in zip(proof, signature))
            if (password is None or len(proof) != len(signature)
                    or not hmac.compare_digest(hashlib.sha256(client_key).digest(), stored_key)):
                return _fail(ctx, "authentication failed: bad user name or password")
            server_sig = hmac.new(server_key, auth_message, hashlib.sha256).digest()
            conn.principal, conn.authenticated = state["user"], True
            conn.sasl_state = {"mechanism": mech, "step": 2}
            return _ok(ctx, b"v=" + base64.b64encode(server_sig))
    return _fail(ctx, "SaslAuthenticate without a SaslHandshake")


def register(registry: Registry) -> None:
    registry.register(SASL_HANDSHAKE, 1, 1, handle_handshake)
    registry.register(SASL_AUTHENTICATE, 0, 2, handle_authenticate)
