"""A table remembers how it is loaded (its ``kafkastore.load.*`` properties): later
runs fill what they leave out from there, a conflicting flag is one line naming the
property and both values, a table created before the properties existed takes its
flags as given; and a load refused on its arguments creates nothing."""
from __future__ import annotations

import json
import os

import pytest

from kafkastore.errors import ConfigError
from pipelines.warehouse.catalog import Warehouse
from pipelines.warehouse.reads import read_arrow
from pipelines.cli import main as cli_main
from pipelines.jobs.load import base_decoded_schema, nullable
from pipelines.spec.load_spec import LoadSpec, stored_load
from pipelines.spec.table_layout import LOAD_PROPERTIES, LOAD_PROPERTY_PREFIX
from tests.helpers.cli import cli_runner, one_error_line

DDL = "id STRING, balance BIGINT"


def _table(wh, spec: LoadSpec, with_properties: bool = True):
    props = spec.load_properties() if with_properties else {}
    if spec.mode == "upsert":
        props.update({"kafkastore.mode": "upsert",
                      "kafkastore.key-columns": ",".join(spec.upsert_keys)})
    return wh.create_table(spec.table, nullable(base_decoded_schema()), spec.layout,
                           properties=props)


@pytest.fixture
def wh(tmp_path):
    return Warehouse(f"file://{tmp_path}/wh")


def test_every_load_property_is_under_the_one_prefix():
    assert all(v.startswith(LOAD_PROPERTY_PREFIX) for v in LOAD_PROPERTIES.values())
    spec = LoadSpec(topic="t", table="acc", mode="upsert", key_columns=("id",),
                    value_format="json", value_schema=DDL, partition_by=(),
                    decode={"confluent_wire_format": True})
    props = spec.load_properties()
    assert set(props) <= set(LOAD_PROPERTIES.values())
    assert stored_load(props) == {"value_format": "json", "value_schema": DDL,
                                  "value_schema_file": None,
                                  "decode": {"confluent_wire_format": True},
                                  "cdc": None, "partition_by": ()}


def test_a_spec_without_flags_takes_the_tables_load(wh):
    loaded = LoadSpec(topic="t", table="acc", mode="upsert", key_columns=("id",),
                      value_format="json", value_schema=DDL, partition_by=(),
                      decode={"confluent_wire_format": True})
    tbl = _table(wh, loaded)
    settled = LoadSpec(topic="t", table="acc").for_table(tbl)
    assert (settled.value_format, settled.value_schema, dict(settled.decode),
            settled.partition_by, settled.mode, settled.upsert_keys) == (
        "json", DDL, {"confluent_wire_format": True}, (), "upsert", ("id",))
    # The same flags again agree; a new value schema is how a reprocess fixes a decoder.
    assert loaded.for_table(tbl).value_schema == DDL
    fixed = LoadSpec(topic="t", table="acc", value_format="json",
                     value_schema=DDL + ", owner STRING").for_table(tbl)
    assert fixed.value_schema.endswith("owner STRING") and fixed.partition_by == ()


@pytest.mark.parametrize("given, prop, flag", [
    ({"value_format": "avro", "value_schema": '"string"'}, "kafkastore.load.value-format",
     "--value-format"),
    ({"value_format": "json", "value_schema": DDL, "decode": {"confluent_wire_format": False}},
     "kafkastore.load.decode[confluent_wire_format]", "--confluent-wire-format"),
    ({"partition_by": ("day(timestamp)", "partition")}, "kafkastore.load.partition-by",
     "--partition-by"),
    ({"cdc": "debezium", "key_columns": ("id",), "value_format": "json", "value_schema": DDL},
     "kafkastore.load.cdc", "--cdc"),
])
def test_a_conflicting_value_is_one_line_naming_the_property_and_both_values(wh, given, prop,
                                                                             flag):
    tbl = _table(wh, LoadSpec(topic="t", table="acc", mode="upsert", key_columns=("id",),
                              value_format="json", value_schema=DDL, partition_by=(),
                              decode={"confluent_wire_format": True}))
    with pytest.raises(ConfigError) as err:
        LoadSpec(topic="t", table="acc", **given).for_table(tbl)
    msg = str(err.value)
    assert "\n" not in msg and prop in msg and flag in msg and "table acc" in msg


def test_a_table_from_before_the_properties_takes_the_flags_as_given(wh):
    old = LoadSpec(topic="t", table="acc", value_format="json", value_schema=DDL)
    tbl = _table(wh, old, with_properties=False)
    assert stored_load(tbl.metadata.properties) is None
    bare = LoadSpec(topic="t", table="acc")
    assert bare.for_table(tbl) == LoadSpec(topic="t", table="acc", mode="append")
    other = LoadSpec(topic="t", table="acc", value_format="avro", value_schema='"string"')
    assert other.for_table(tbl).value_format == "avro"


@pytest.fixture
def run(spark, tmp_path, capsys, monkeypatch):
    conf = tmp_path / "k.yaml"
    conf.write_text("{}\n")
    monkeypatch.setenv("KAFKASTORE_CONF", str(conf))
    monkeypatch.setenv("KAFKASTORE_ROOT", f"file://{tmp_path}/root")
    monkeypatch.setenv("KAFKASTORE_WAREHOUSE", f"file://{tmp_path}/wh")
    monkeypatch.setenv("KAFKASTORE_SPARK_MASTER", "local[2]")
    runner = cli_runner(cli_main, capsys, monkeypatch, None)
    runner.wh_dir = tmp_path / "wh"
    return runner


def _produce_accounts(run):
    assert run("topics", "create", "accounts", "--partitions", "2")[0] == 0
    lines = "".join(json.dumps({"key": f"a{i % 3}", "value": {"id": f"a{i % 3}", "balance": i}})
                    + "\n" for i in range(6))
    assert run("produce", "accounts", stdin=lines)[0] == 0


def test_cli_load_with_a_conflicting_flag_is_refused_in_one_line(run):
    _produce_accounts(run)
    assert run("load", "accounts", "--table", "accounts", "--mode", "upsert",
               "--value-format", "json", "--value-schema", DDL)[0] == 0
    rc, _, err = run("load", "accounts", "--table", "accounts", "--value-format", "avro",
                     "--value-schema", '"string"')
    line = one_error_line(rc, err)
    assert "kafkastore.load.value-format" in line and '"json"' in line and '"avro"' in line


def test_a_load_refused_on_its_key_columns_creates_nothing(run):
    _produce_accounts(run)
    rc, _, err = run("load", "accounts", "--table", "accounts", "--mode", "upsert",
                     "--key-columns", "account_id", "--value-format", "json",
                     "--value-schema", DDL)
    line = one_error_line(rc, err)
    assert "account_id" in line
    wh = Warehouse(f"file://{run.wh_dir}")
    assert wh.list_tables() == []
    assert not os.path.exists(run.wh_dir) or not any(
        files for _, _, files in os.walk(run.wh_dir))


def test_a_failed_first_load_drops_the_empty_tables_it_created(wh):
    from pipelines.jobs.load import CreatedTables

    created = CreatedTables.before(wh, ["ns.acc", "ns.acc_dead_letters"])
    spec = LoadSpec(topic="t", table="ns.acc", value_format="json", value_schema=DDL)
    tbl = _table(wh, spec)
    _table(wh, LoadSpec(topic="t", table="ns.acc_dead_letters"))
    location = tbl.location()
    created.drop_unused()
    assert wh.list_tables() == []
    assert not wh.namespace_exists("ns")
    assert not os.path.exists(location.split("://", 1)[1])
    # A table that existed before the load is never dropped.
    kept = _table(wh, LoadSpec(topic="t", table="acc"))
    CreatedTables.before(wh, ["acc"]).drop_unused()
    assert wh.load_table("acc") is not None and kept is not None


def test_a_runs_policy_may_differ_from_the_tables(wh):
    tbl = _table(wh, LoadSpec(topic="t", table="acc", value_format="avro",
                              decode={"schema_registry": "http://127.0.0.1:1",
                                      "on_incompatible": "dead-letter"}))
    strict = LoadSpec(topic="t", table="acc", value_format="avro",
                      decode={"schema_registry": "http://127.0.0.1:1",
                              "on_incompatible": "fail"}).for_table(tbl)
    assert strict.decode["on_incompatible"] == "fail"
    assert LoadSpec(topic="t", table="acc").for_table(tbl).decode == {
        "schema_registry": "http://127.0.0.1:1", "on_incompatible": "dead-letter"}
    with pytest.raises(ConfigError, match=r"kafkastore\.load\.decode\[schema_registry\]"):
        LoadSpec(topic="t", table="acc", value_format="avro",
                 decode={"schema_registry": "http://127.0.0.1:2"}).for_table(tbl)


# A value equal to the default, given explicitly, is given: it conflicts with the table's
# recorded load as any other value would; nothing given takes the table's.

def _unpartitioned_json(wh):
    return _table(wh, LoadSpec(topic="t", table="acc", value_format="json", value_schema=DDL,
                               partition_by=()))


@pytest.mark.parametrize("how", ["spec", "override", "entry"])
def test_the_default_partitioning_given_explicitly_conflicts(wh, how):
    from pipelines.spec.table_layout import DEFAULT_PARTITION_BY

    tbl = _unpartitioned_json(wh)
    spec = {"spec": lambda: LoadSpec(topic="t", table="acc", partition_by=DEFAULT_PARTITION_BY),
            "override": lambda: LoadSpec(topic="t", table="acc").with_overrides(
                partition_by=list(DEFAULT_PARTITION_BY)),
            "entry": lambda: LoadSpec.from_entry({"topic": "t", "table": "acc",
                                                  "partition_by": ["day(timestamp)"]}),
            }[how]()
    with pytest.raises(ConfigError) as err:
        spec.for_table(tbl)
    msg = str(err.value)
    assert "\n" not in msg and "kafkastore.load.partition-by" in msg and "day(timestamp)" in msg
    # Not given: the table's.
    assert LoadSpec(topic="t", table="acc").for_table(tbl).partition_by == ()
    assert LoadSpec.from_entry({"topic": "t", "table": "acc"}).for_table(tbl).partition_by == ()


@pytest.mark.parametrize("how", ["spec", "override", "entry"])
def test_the_default_value_format_given_explicitly_conflicts(wh, how):
    tbl = _unpartitioned_json(wh)
    spec = {"spec": lambda: LoadSpec(topic="t", table="acc", value_format="raw"),
            "override": lambda: LoadSpec(topic="t", table="acc").with_overrides(
                value_format="raw"),
            "entry": lambda: LoadSpec.from_entry({"topic": "t", "table": "acc",
                                                  "value_format": "raw"}),
            }[how]()
    with pytest.raises(ConfigError) as err:
        spec.for_table(tbl)
    msg = str(err.value)
    assert "\n" not in msg and "kafkastore.load.value-format" in msg and '"raw"' in msg
    settled = LoadSpec(topic="t", table="acc").for_table(tbl)
    assert (settled.value_format, settled.value_schema) == ("json", DDL)


def test_a_spec_settled_twice_stays_settled(wh):
    tbl = _unpartitioned_json(wh)
    once = LoadSpec(topic="t", table="acc").for_table(tbl)
    assert once.for_table(tbl) == once
    # A registry option alone, the format left out: the table's format.
    reg = _table(wh, LoadSpec(topic="t", table="reg", value_format="avro", partition_by=(),
                              decode={"schema_registry": "http://127.0.0.1:1"}))
    settled = LoadSpec(topic="t", table="reg",
                       decode={"on_incompatible": "fail"}).for_table(reg)
    assert (settled.value_format, settled.decode["schema_registry"]) == (
        "avro", "http://127.0.0.1:1")


def test_cli_flags_equal_to_the_defaults_conflict_with_the_table(run):
    _produce_accounts(run)
    assert run("load", "accounts", "--table", "accounts", "--value-format", "json",
               "--value-schema", DDL, "--partition-by", "partition")[0] == 0
    for flags, prop, value in (
            (("--partition-by", "day(timestamp)"), "kafkastore.load.partition-by",
             "day(timestamp)"),
            (("--value-format", "raw"), "kafkastore.load.value-format", '"raw"')):
        rc, _, err = run("load", "accounts", "--table", "accounts", *flags)
        line = one_error_line(rc, err)
        assert prop in line and value in line
    # No flag: the table's decoder and partitioning.
    assert run("produce", "accounts", stdin=json.dumps(
        {"key": "a9", "value": {"id": "a9", "balance": 9}}) + "\n")[0] == 0
    assert run("load", "accounts", "--table", "accounts")[0] == 0
    tbl = Warehouse(f"file://{run.wh_dir}").table("accounts")
    assert [f.name for f in tbl.spec().fields] == ["partition"]
    rows = read_arrow(tbl).to_pylist()
    assert len(rows) == 7 and {r["id"] for r in rows} == {"a0", "a1", "a2", "a9"}
