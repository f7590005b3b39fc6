"""The README's warehouse examples, run literally through the ``kafkastore`` entry point
(in-process, the session's SparkSession), then reprocessed, maintained and loaded
again: after every step each table equals a model computed here in Python.

The commands are read from README.md itself (its upsert and Debezium sections), so an
example that stops working, or drifts from what the code does, fails here.
"""
from __future__ import annotations

import json
import os
import re
import shlex

import pytest

from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import read_arrow
from pipelines.cli import main as cli_main
from tests.helpers.cli import cli_runner

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def _readme_commands(first_words: str) -> list[tuple[list[str], str | None]]:
    """The commands of the README's bash block that starts with ``first_words``:
    ``(argv without 'kafkastore', heredoc stdin or None)``, continuation lines joined,
    comments dropped."""
    text = open(README, encoding="utf-8").read()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if b.startswith(first_words)]
    lines = block.replace("\\\n", " ").splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i].split("  #")[0].strip()
        i += 1
        if not line.startswith("kafkastore "):
            continue
        stdin = None
        if "<<'EOF'" in line:
            line = line.replace("<<'EOF'", "")
            body = []
            while lines[i] != "EOF":
                body.append(lines[i])
                i += 1
            i += 1
            stdin = "\n".join(body) + "\n"
        out.append((shlex.split(line)[1:], stdin))
    return out


def _readme_command(first_words: str, starts: str) -> list[str]:
    (argv,) = [a for a, _ in _readme_commands(first_words) if " ".join(a).startswith(starts)]
    return argv


@pytest.fixture
def run(spark, tmp_path, capsys, monkeypatch):
    """``kafkastore`` in-process over a fresh root and warehouse (from the environment,
    as the README's commands name neither)."""
    conf = tmp_path / "k.yaml"
    conf.write_text("{}\n")
    monkeypatch.setenv("KAFKASTORE_CONF", str(conf))
    monkeypatch.setenv("KAFKASTORE_ROOT", f"file://{tmp_path}/root")
    monkeypatch.setenv("KAFKASTORE_WAREHOUSE", f"file://{tmp_path}/wh")
    monkeypatch.setenv("KAFKASTORE_SPARK_MASTER", "local[2]")
    runner = cli_runner(cli_main, capsys, monkeypatch, None)

    def ok(*argv, stdin=None):
        rc, out, err = runner(*argv, stdin=stdin)
        assert rc == 0, (argv, err[-2000:])
        return out

    ok.wh = Warehouse(f"file://{tmp_path}/wh")
    ok.raw = runner
    return ok


def _rows(wh, table):
    return read_arrow(wh.table(table)).to_pylist()


# ---------------------------------------------------------------------------
# upsert: accounts


def _account_model(records):
    state = {}
    for r in records:
        if r["value"] is None:
            state.pop(r["key"], None)
        else:
            state[r["key"]] = r["value"]["balance"]
    return state


def _account_state(wh):
    rows = _rows(wh, "accounts")
    assert "value" not in rows[0]            # decoded, never the raw value column
    assert all(r["balance"] is not None for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    return {r["id"]: r["balance"] for r in rows}


def _more_accounts(start: int, n: int) -> list[dict]:
    out = []
    for i in range(start, start + n):
        key = f"a{i % 4}"
        value = None if i % 7 == 3 else {"id": key, "balance": i}
        out.append({"key": key, "value": value})
    return out


def _jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_readme_upsert_example_then_reprocess_maintain_and_load(run):
    commands = _readme_commands("kafkastore topics create accounts")
    records = []
    for argv, stdin in commands:
        if argv[0] == "sql":
            continue
        run(*argv, stdin=stdin)
        if stdin:
            records += [json.loads(line) for line in stdin.splitlines()]
    assert _account_state(run.wh) == _account_model(records) == {"a1": 7}
    load = next(a for a, _ in commands if a[0] == "load")
    # More changes, so that every partition has records past offset 5.
    extra = _more_accounts(0, 40)
    run("produce", "accounts", stdin=_jsonl(extra))
    records += extra
    run(*load)
    model = _account_model(records)
    assert _account_state(run.wh) == model
    # The README's reprocess, followed literally: the decoder is the table's.
    reprocess = _readme_reprocess_accounts()
    run(*reprocess)
    assert _account_state(run.wh) == model
    run("maintain", "--table", "accounts")
    assert _account_state(run.wh) == model
    extra = _more_accounts(40, 9)
    run("produce", "accounts", stdin=_jsonl(extra))
    records += extra
    run("load", "accounts", "--table", "accounts")       # no flags: the table's load
    assert _account_state(run.wh) == _account_model(records)
    run(*load)                                            # the README's again: a no-op
    assert _account_state(run.wh) == _account_model(records)


def _readme_reprocess_accounts() -> list[str]:
    text = open(README, encoding="utf-8").read()
    m = re.search(r"`kafkastore (reprocess accounts [^`]*)`", text)
    argv = shlex.split(m.group(1).replace("--from-offset N", "--from-offset 5"))
    return argv


# ---------------------------------------------------------------------------
# Debezium: customers


def _debezium_events():
    """Change events of a Postgres ``inventory.customers``: a snapshot, inserts,
    updates, deletes with their tombstones (JsonConverter, schemas.enable=false)."""
    events, lsn = [], 1000
    rows = {}

    def change(op, id_, email=None):
        nonlocal lsn
        lsn += 8
        before = {"id": id_} if op == "d" else None
        after = None if op == "d" else {"id": id_, "first_name": f"f{id_}",
                                         "last_name": f"l{id_}", "email": email}
        key = json.dumps({"id": id_})   # the connector's JSON key, as a string
        events.append({"key": key, "value": {
            "before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000 + lsn,
            "source": {"connector": "postgresql", "name": "dbserver1", "db": "inventory",
                       "schema": "inventory", "table": "customers", "lsn": lsn}}})
        if op == "d":
            events.append({"key": key, "value": None})
            rows.pop(id_, None)
        else:
            rows[id_] = email

    for i in range(1001, 1006):
        change("r", i, f"{i}@example.com")
    for n in range(24):
        i = 1001 + n % 7
        if n % 5 == 4 and i in rows:
            change("d", i)
        else:
            change("c" if i not in rows else "u", i, f"{i}-{n}@example.com")
    return events, rows


def _customers(wh):
    rows = _rows(wh, "customers")
    assert "value" not in rows[0]
    return {r["id"]: r["email"] for r in rows}


def test_readme_debezium_example_then_reprocess_maintain_and_load(run):
    load = _readme_command("kafkastore load dbserver1.inventory.customers", "load")
    topic = load[1]
    events, model = _debezium_events()
    run("topics", "create", topic, "--partitions", "2")
    run("produce", topic, stdin=_jsonl(events[:20]))
    run(*load)
    run("produce", topic, stdin=_jsonl(events[20:]))
    run(*load)
    assert _customers(run.wh) == model
    run("reprocess", topic, "--table", "customers", "--from-offset", "3")
    assert _customers(run.wh) == model
    run("maintain", "--table", "customers")
    assert _customers(run.wh) == model
    run("load", topic, "--table", "customers")
    assert _customers(run.wh) == model


# ---------------------------------------------------------------------------
# a decoded append table


def test_decoded_append_table_reprocess_uses_the_tables_decoder(run):
    values = [{"id": i, "amount": i * 10} for i in range(30)]
    run("topics", "create", "orders", "--partitions", "2")
    run("produce", "orders", stdin=_jsonl([{"key": str(v["id"]), "value": v} for v in values]))
    run("load", "orders", "--table", "order_events", "--value-format", "json",
        "--value-schema", "id INT, amount BIGINT")

    def state():
        rows = _rows(run.wh, "order_events")
        assert "value" not in rows[0]
        return sorted((r["id"], r["amount"]) for r in rows)

    model = sorted((v["id"], v["amount"]) for v in values)
    assert state() == model
    run("reprocess", "orders", "--table", "order_events", "--from-offset", "5")
    assert state() == model
    run("maintain", "--table", "order_events")
    assert state() == model
    more = [{"id": i, "amount": i * 10} for i in range(30, 36)]
    run("produce", "orders", stdin=_jsonl([{"key": str(v["id"]), "value": v} for v in more]))
    run("load", "orders", "--table", "order_events")
    assert state() == sorted(model + [(v["id"], v["amount"]) for v in more])
