"""One home for API keys and error codes: the table in ``protocol/wire/api_keys.py`` covers
every API the broker registers (its versions within the row's), and no module of
``kafkastore/protocol`` defines its own API key or error code number."""
import ast
from pathlib import Path

from kafkastore.protocol.wire import error_codes
from kafkastore.protocol.wire.api_keys import ApiKey, api_name, client_throttles, quota_exempt
from kafkastore.protocol.server import BrokerServer, ServeOptions
from kafkastore.storage import Storage

PROTOCOL = Path(__file__).resolve().parents[2] / "kafkastore" / "protocol"
HOMES = {"api_keys.py", "error_codes.py"}
ERROR_NAMES = {n for n, v in vars(error_codes).items() if n.isupper() and isinstance(v, int)}
KEY_NAMES = set(ApiKey.__members__)


def test_every_registered_api_is_in_the_table_within_its_versions(tmp_path):
    server = BrokerServer(Storage(f"file://{tmp_path}"), ServeOptions(port=0, credentials={"u": "p"}))
    try:
        served = server.registry.api_versions()
    finally:
        server.pool.shutdown()
    assert served
    for key, lo, hi in served:
        row = ApiKey(key)   # ValueError: a registered key missing from the table
        assert row.min_version <= lo <= hi <= row.max_version, (row.name, lo, hi)


def test_the_table_answers_names_throttling_and_exemptions():
    assert api_name(1) == "Fetch" and api_name(1000) == "1000"
    # KIP-219: Fetch v7 clients do not wait out a throttle themselves, v8 ones do; an API
    # outside the table (an extension's) is taken as newer than KIP-219
    assert not client_throttles(1, 7) and client_throttles(1, 8) and client_throttles(1000, 0)
    assert {k for k in ApiKey if quota_exempt(k)} == {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE,
                                                       ApiKey.SASL_AUTHENTICATE}
    assert len({k.kafka_name for k in ApiKey}) == len(ApiKey)


def _int_constants(tree: ast.Module):
    """(name, line) of every module-level ``NAME = <int>`` (tuples of them included)."""
    def is_int(node):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) is int

    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign):
            continue
        for target in stmt.targets:
            if isinstance(target, ast.Name) and is_int(stmt.value):
                yield target.id, stmt.lineno
            elif isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
                for t, v in zip(target.elts, stmt.value.elts):
                    if isinstance(t, ast.Name) and is_int(v):
                        yield t.id, stmt.lineno


def test_no_module_defines_its_own_api_key_or_error_code():
    found = []
    for path in sorted(PROTOCOL.rglob("*.py")):
        if path.name in HOMES:
            continue
        for name, line in _int_constants(ast.parse(path.read_text(), str(path))):
            if name in ERROR_NAMES or name in KEY_NAMES:
                found.append(f"{path.relative_to(PROTOCOL)}:{line} {name}")
    assert found == [], "import it from protocol/wire/api_keys.py or protocol/wire/error_codes.py"


def test_the_check_sees_a_redefinition():
    tree = ast.parse("FETCH, LIST_OFFSETS = 1, 2\nNOT_COORDINATOR = 16\nTICK_S = 0.1\nX = -1\n")
    assert [n for n, _ in _int_constants(tree)] == ["FETCH", "LIST_OFFSETS", "NOT_COORDINATOR", "X"]
