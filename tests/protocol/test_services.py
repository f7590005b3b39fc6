"""The broker's shared services are typed fields of ``server.services``, and the server's own
parts are attributes every server has: no module of ``kafkastore/protocol`` reaches the
server through getattr/setattr/hasattr of a name, nor sets an attribute on it."""
import asyncio
import re
from pathlib import Path

from kafkastore.protocol.apis import groups as api_groups, txn as api_txn
from kafkastore.protocol.server import BrokerThread, ServeOptions
from kafkastore.protocol.services import BrokerServices
from kafkastore.storage import Storage

PROTOCOL = Path(__file__).resolve().parents[2] / "kafkastore" / "protocol"
#: getattr / setattr / hasattr of any name on the broker or server (``ctx.broker``, ``server``...).
REFLECTED = re.compile(r"\b(?:getattr|setattr|hasattr)\(\s*(?:[\w.]*\.)?(?:broker|server)\s*,")
#: An attribute assigned on the broker or server from outside it.
ASSIGNED = re.compile(r"\b(?:[\w.]*\.)?(?:broker|server)\.\w+\s*=[^=]")


def offenders(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if REFLECTED.search(line) or ASSIGNED.search(line)]


def test_no_private_names_reached_on_the_server():
    found = [f"{p.name}: {line}" for p in sorted(PROTOCOL.rglob("*.py")) if p.name != "server.py"
             for line in offenders(p.read_text())]
    assert found == []


def test_the_check_sees_the_old_ways():
    assert offenders('svc = getattr(broker, "_group_service", None)')
    assert offenders("cache = ctx.broker._scram_file_keys = {}")
    assert offenders('getattr(self.broker, "_spawn", asyncio.ensure_future)(later())')
    assert not offenders("svc = broker.services.group_service")
    assert offenders('authorizer = getattr(ctx.broker, "authorizer", None)')
    assert offenders("users = broker.scram_users = ScramUsers(broker.storage)")
    assert offenders("self.server.peak_connection_bytes = self._inflight_bytes")
    assert not offenders('getattr(ctx.broker.options, "transaction_max_timeout_ms", 900_000)')
    assert not offenders('getattr(broker.brokers, "fence_epoch", 0)')
    assert not offenders("self.server = server")
    assert not offenders("if ctx.broker.authorizer is None:")


def test_services_are_built_with_the_server_and_shared(tmp_path):
    with BrokerThread(Storage(f"file://{tmp_path}"), ServeOptions(port=0)) as b:
        services = b.server.services
        assert isinstance(services, BrokerServices)
        # the transaction service starts with the server; the group service on first use
        assert services.txn_service is api_txn.service(b.server)
        assert api_txn.transactional_groups(b.server) is services.txn_groups
        group = asyncio.run_coroutine_threadsafe(_group_service(b.server), b.server.loop).result(10)
        assert group is services.group_service is api_groups.service(b.server)


async def _group_service(server):
    return api_groups.service(server)
