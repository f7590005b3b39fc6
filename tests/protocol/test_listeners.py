"""The listener rules with plain arguments: what the Kafka, metrics and schema-registry
listeners share, checked without building a server's options."""
import pytest

from kafkastore.errors import ConfigError
from kafkastore.protocol.listeners import (check_listener_security, is_loopback, sasl_enabled,
                                           security_protocol)


def test_loopback_addresses():
    assert is_loopback("localhost") and is_loopback("127.0.0.1") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")


def test_non_loopback_needs_tls_and_sasl_unless_insecure():
    with pytest.raises(ConfigError, match="requires TLS .* and SASL"):
        check_listener_security("0.0.0.0", tls=False, sasl=False, insecure=False)
    with pytest.raises(ConfigError, match=r"requires SASL \(--sasl or --sasl-credentials\), or"):
        check_listener_security("0.0.0.0", tls=True, sasl=False, insecure=False)
    check_listener_security("0.0.0.0", tls=True, sasl=True, insecure=False)
    check_listener_security("0.0.0.0", tls=False, sasl=False, insecure=True)
    check_listener_security("127.0.0.1", tls=False, sasl=False, insecure=False)


def test_non_loopback_metrics_need_tls():
    with pytest.raises(ConfigError, match="metrics on 0.0.0.0"):
        check_listener_security("127.0.0.1", tls=False, sasl=False, insecure=False,
                                metrics_host="0.0.0.0")
    check_listener_security("127.0.0.1", tls=True, sasl=False, insecure=False, metrics_host="0.0.0.0")


def test_security_protocol_names():
    assert [security_protocol(sasl=s, tls=t) for s in (False, True) for t in (False, True)] == [
        "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
    assert sasl_enabled(False, {"u": "p"}) and sasl_enabled(True, None)
    assert not sasl_enabled(False, {}) and not sasl_enabled(False, None)
