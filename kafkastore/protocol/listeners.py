"""The listener rules every kafkastore listener follows (Kafka, metrics, schema registry).

A listener that accepts connections from other machines needs TLS and SASL unless the
operator says ``--insecure`` (DESIGN 8); a metrics listener, which has no SASL, needs TLS.
The rules take plain arguments (host, whether TLS / SASL are on, ``insecure``), so every
listener checks them without building the Kafka server's options: this module imports
only :mod:`kafkastore.errors` and sits below the server and the schema registry.
"""
from __future__ import annotations

import ipaddress

from ..errors import ConfigError


def is_loopback(host: str) -> bool:
    """Whether a listen address only accepts local connections."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def sasl_enabled(sasl: bool, credentials: dict | None) -> bool:
    """Whether clients must authenticate with SASL: ``--sasl`` (the root's SCRAM users) or
    ``--sasl-credentials`` (a non-empty ``{user: password}``)."""
    return sasl or bool(credentials)


def security_protocol(*, sasl: bool, tls: bool) -> str:
    """Kafka's name for a listener's security: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    return {(False, False): "PLAINTEXT", (False, True): "SSL", (True, False): "SASL_PLAINTEXT",
            (True, True): "SASL_SSL"}[(sasl, tls)]


def check_listener_security(host: str, *, tls: bool, sasl: bool, insecure: bool,
                            metrics_host: str | None = None) -> None:
    """Refuse an unsafe listener with a one-line :class:`ConfigError`.

    A non-loopback ``host`` needs TLS and SASL unless ``insecure``; a non-loopback
    ``metrics_host`` (the metrics listener, None when off) needs TLS unless ``insecure``.
    """
    if metrics_host is not None and not insecure and not is_loopback(metrics_host) and not tls:
        raise ConfigError(f"metrics on {metrics_host} (not loopback) require TLS "
                          f"(--tls-cert/--tls-key), or --insecure")
    if is_loopback(host) or insecure:
        return
    missing = [what for what, ok in (("TLS (--tls-cert/--tls-key)", tls),
                                     ("SASL (--sasl or --sasl-credentials)", sasl))
               if not ok]
    if missing:
        raise ConfigError(f"listening on {host} (not loopback) requires {' and '.join(missing)}, "
                          f"or --insecure")
