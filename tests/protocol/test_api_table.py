"""The APIs the broker serves, pinned: the full ApiVersions answer (every key with its
version range, SASL off and on) and the handler that serves each (key, version).

Written before the handler table was rebuilt around one ordered list of API families
(one registration per key, old versions dispatched inside the handler): the answers and
the choices must stay exactly these.
"""
import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kafkastore.errors import DuplicateApiError
from kafkastore.protocol.apis import fetch as api_fetch, legacy as api_legacy
from kafkastore.protocol.wire.api_keys import FETCH, INIT_PRODUCER_ID
from kafkastore.protocol.families import FAMILIES, register_families
from kafkastore.protocol.handler_table import HandlerTable, by_version
from kafkastore.protocol.server import BrokerServer, BrokerThread, ServeOptions
from kafkastore.storage import Storage
from tests.protocol.wire import Wire

#: key -> [(first version, last version, "module.handler")] with SASL off.
HANDLERS = {
    0: [(0, 11, 'apis.produce.handle_produce')],
    1: [(0, 3, 'apis.legacy.handle_old_fetch'), (4, 17, 'apis.fetch.handle_fetch')],
    2: [(0, 0, 'apis.legacy.handle_old_list_offsets'), (1, 9, 'apis.fetch.handle_list_offsets')],
    3: [(0, 12, 'apis.meta.handle_metadata')],
    8: [(2, 8, 'apis.groups.handle_offset_commit')],
    9: [(1, 7, 'apis.groups.handle_offset_fetch')],
    10: [(0, 6, 'apis.groups.handle_find_coordinator')],
    11: [(0, 9, 'apis.groups.handle_join_group')],
    12: [(0, 4, 'apis.groups.handle_heartbeat')],
    13: [(0, 5, 'apis.groups.handle_leave_group')],
    14: [(0, 5, 'apis.groups.handle_sync_group')],
    15: [(0, 5, 'apis.groups.handle_describe_groups')],
    16: [(0, 5, 'apis.groups.handle_list_groups')],
    18: [(0, 4, 'apis.meta.handle_api_versions')],
    19: [(2, 7, 'apis.admin.handle_create_topics')],
    20: [(1, 5, 'apis.admin.handle_delete_topics')],
    21: [(0, 2, 'apis.admin.handle_delete_records')],
    22: [(0, 5, 'apis.txn.handle_init_producer_id')],
    24: [(0, 5, 'apis.txn.handle_add_partitions')],
    25: [(0, 4, 'apis.txn.handle_add_offsets')],
    26: [(0, 4, 'apis.txn.handle_end_txn')],
    27: [(1, 1, 'apis.txn.handle_write_txn_markers')],
    28: [(0, 4, 'apis.txn.handle_txn_offset_commit')],
    29: [(1, 3, 'apis.acls.handle_describe_acls')],
    30: [(1, 3, 'apis.acls.handle_create_acls')],
    31: [(1, 3, 'apis.acls.handle_delete_acls')],
    32: [(1, 4, 'apis.admin.handle_describe_configs')],
    33: [(0, 2, 'apis.configs.handle_alter_configs')],
    35: [(1, 4, 'apis.cluster.handle_describe_log_dirs')],
    37: [(0, 3, 'apis.admin.handle_create_partitions')],
    42: [(0, 2, 'apis.groups.handle_delete_groups')],
    44: [(0, 1, 'apis.configs.handle_incremental_alter_configs')],
    47: [(0, 0, 'apis.groups.handle_offset_delete')],
    48: [(0, 1, 'apis.client_quotas.handle_describe')],
    49: [(0, 1, 'apis.client_quotas.handle_alter')],
    50: [(0, 0, 'apis.users.handle_describe')],
    51: [(0, 0, 'apis.users.handle_alter')],
    60: [(0, 1, 'apis.cluster.handle_describe_cluster')],
    61: [(0, 0, 'apis.cluster.handle_describe_producers')],
    65: [(0, 0, 'apis.txn.handle_describe_transactions')],
    66: [(0, 1, 'apis.txn.handle_list_transactions')],
    75: [(0, 0, 'apis.cluster.handle_describe_topic_partitions')],
}
#: What SASL adds.
SASL_HANDLERS = {
    17: [(1, 1, 'apis.sasl.handle_handshake')],
    36: [(0, 2, 'apis.sasl.handle_authenticate')],
}


def chosen(handler, version):
    """The function that answers ``version`` (a handler serving several implementations by
    version names the one it picks through ``for_version``)."""
    pick = getattr(handler, "for_version", None)
    return pick(version) if pick is not None else handler


def served(registry) -> dict:
    """The registry as ``HANDLERS`` writes it: per key, runs of versions with one handler."""
    table = {}
    for key, lo, hi in registry.api_versions():
        runs = []
        for v in range(lo, hi + 1):
            fn = chosen(registry.get(key).handler, v)
            name = f"{fn.__module__.removeprefix('kafkastore.protocol.')}.{fn.__qualname__}"
            if runs and runs[-1][2] == name:
                runs[-1][1] = v
            else:
                runs.append([v, v, name])
        table[key] = [tuple(r) for r in runs]
    return table


def expected(sasl: bool) -> dict:
    return dict(sorted({**HANDLERS, **(SASL_HANDLERS if sasl else {})}.items()))


@pytest.mark.parametrize("sasl", [False, True], ids=["plaintext", "sasl"])
def test_api_versions_answer_and_handlers_are_pinned(tmp_path, sasl):
    opts = ServeOptions(port=0, credentials={"u": "pw"} if sasl else None)
    with BrokerThread(Storage(f"file://{tmp_path}"), opts) as b:
        assert served(b.server.registry) == expected(sasl)
        w = Wire(b.bootstrap)
        resp = w.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        w.sock.close()
    assert int(resp.error_code) == 0
    got = [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in resp.api_keys]
    assert got == [(key, runs[0][0], runs[-1][1]) for key, runs in expected(sasl).items()]


def test_a_key_is_registered_once():
    table = HandlerTable()
    table.register(FETCH, 4, 17, api_fetch.handle_fetch)
    with pytest.raises(DuplicateApiError, match="API 1 is registered twice"):
        table.register(FETCH, 0, 3, api_legacy.handle_old_fetch)
    assert table.api_versions() == [(FETCH, 4, 17)]   # the first registration stands


def test_every_family_registers_its_own_keys_in_one_ordered_list():
    """The families together register each key once (no family replaces another's): the
    whole list registers into one table without a DuplicateApiError."""
    table = HandlerTable()
    register_families(table, sasl_enabled=True)
    owners = {}
    for family in FAMILIES:
        alone = HandlerTable()
        family.register(alone)
        for key, _, _ in alone.api_versions():
            assert key not in owners, (key, owners.get(key), family.__name__)
            owners[key] = family.__name__
    assert owners[INIT_PRODUCER_ID] == "kafkastore.protocol.apis.txn"


def test_an_extension_may_add_a_key_but_not_replace_one(tmp_path):
    def replace_fetch(table):
        table.register(FETCH, 4, 17, api_fetch.handle_fetch)

    with pytest.raises(DuplicateApiError):
        BrokerServer(Storage(f"file://{tmp_path}"), ServeOptions(port=0), extensions=[replace_fetch])


def test_by_version_names_the_function_it_calls():
    handle = by_version(4, api_legacy.handle_old_fetch, api_fetch.handle_fetch)
    assert [handle.for_version(v) for v in (0, 3, 4, 17)] == [
        api_legacy.handle_old_fetch, api_legacy.handle_old_fetch, api_fetch.handle_fetch,
        api_fetch.handle_fetch]
