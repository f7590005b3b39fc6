"""serve's flags for the limits before authentication and on the metrics listener reach the
broker: observed from outside a `kafkastore serve` process."""
from __future__ import annotations

import socket
import time

from tests.helpers.serve_procs import metrics_port, start_serve, stop_serve
from tests.helpers.sasl_logins import plain_login


def _idle(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.settimeout(5)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _open(s: socket.socket, wait: float = 0.3) -> bool:
    """Whether the broker still holds ``s`` open (it sent nothing, so EOF means closed)."""
    s.settimeout(wait)
    try:
        return s.recv(1) != b""
    except socket.timeout:
        return True
    except OSError:
        return False


def test_serve_flags_set_the_limits_before_authentication(tmp_path):
    creds = tmp_path / "users.txt"
    creds.write_text("alice:s3cret\n")
    proc = start_serve(f"file://{tmp_path}/root", extra=[
        "--sasl-credentials", str(creds), "--max-unauthenticated-connections", "2",
        "--max-unauthenticated-connections-per-ip", "1", "--sasl-auth-timeout-ms", "1500",
        "--sasl-max-failed-logins-per-ip", "2", "--sasl-failed-login-window-ms", "120000",
        "--tls-handshake-timeout-ms", "1000",
        "--metrics-listen", "127.0.0.1:0", "--metrics-max-connections-per-ip", "2"])
    socks = []
    try:
        port = int(proc.bootstrap.rsplit(":", 1)[1])
        mport = metrics_port(proc)
        a1 = _idle(port, "127.0.0.2")
        time.sleep(0.2)
        a2 = _idle(port, "127.0.0.2")      # over the per-address budget of 1: closed at once
        b1 = _idle(port, "127.0.0.3")
        time.sleep(0.2)
        c1 = _idle(port, "127.0.0.4")      # over the total of 2 (no address holds more than
        #                                    it would: none is evicted, the newcomer is closed)
        socks += [a1, a2, b1, c1]
        time.sleep(0.3)
        assert not _open(a2)
        assert [_open(s) for s in (a1, b1, c1)].count(True) == 2
        # The authentication deadline (1.5 s) closes the ones left.
        deadline = time.monotonic() + 30
        while any(_open(s, 0.1) for s in (a1, b1, c1)):
            assert time.monotonic() < deadline, "unauthenticated connections outlived the deadline"
            time.sleep(0.2)
        # Two failed logins from one address, then its logins are refused unchecked.
        assert [plain_login(proc.bootstrap, "127.0.0.5", "alice", "no") for _ in range(3)] == \
            ["failed", "failed", "refused"]
        assert plain_login(proc.bootstrap, "127.0.0.6", "alice", "s3cret") == "ok"
        # The metrics listener's per-address cap: the third idle socket is closed at once.
        m = [_idle(mport, "127.0.0.7") for _ in range(3)]
        socks += m
        time.sleep(0.3)
        assert [_open(s) for s in m] == [True, True, False]
    finally:
        for s in socks:
            s.close()
        stop_serve(proc)


def test_heartbeat_ms_sets_how_often_the_broker_renews_its_registration(tmp_path):
    """A slow store needs a longer authority lease: --heartbeat-ms sets the renewal interval
    (the lease is three of them). Seen from the registration document's renewal times."""
    import json

    from kafkastore.storage import Storage

    root = f"file://{tmp_path}/root"
    proc = start_serve(root, node_id=0, extra=["--heartbeat-ms", "3000"])
    try:
        storage, seen = Storage(root), set()
        end = time.monotonic() + 7.0
        while time.monotonic() < end:
            seen.add(json.loads(storage.get("_brokers/0.json"))["heartbeat_ms"])
            time.sleep(0.2)
        # renewed every 3 s: at most 4 renewals seen in 7 s (every 1 s by default: 7 or 8)
        assert 1 <= len(seen) <= 4, sorted(seen)
    finally:
        stop_serve(proc)
