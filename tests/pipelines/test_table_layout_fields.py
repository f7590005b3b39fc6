"""A table layout's fields are declared once (pipelines.spec.table_layout.LAYOUT_FIELDS),
and the ``load`` CLI, the config parser, the recorded load properties and maintain's
rewrite read the declarations. Stdlib and the spec only: no Spark, no catalog."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from kafkastore.errors import ConfigError
from pipelines.cli import build_parser
from pipelines.spec import load_spec as ls
from pipelines.spec import table_layout as tl
from pipelines.warehouse.properties import FIXED, LOAD_PROPERTIES, RecordedProperty


def _load_parser():
    return build_parser().commands.choices["load"]


def test_every_field_of_the_layout_is_declared():
    assert tl.undeclared_layout_fields() == []
    assert {f.name for f in dataclasses.fields(tl.TableLayout)} == {f.name for f in tl.LAYOUT_FIELDS}


def test_the_load_command_has_the_flag_each_field_declares():
    options = {s for a in _load_parser()._actions for s in a.option_strings}
    declared = [f.flag for f in tl.LAYOUT_FIELDS if f.flag]
    assert declared == ["--partition-by", "--mode", "--key-columns"]
    assert set(declared) <= options


def test_the_config_takes_the_key_each_field_declares():
    assert set(tl.LAYOUT_CONFIG_KEYS) == {"partition_by", "mode", "key_columns"}
    assert set(tl.LAYOUT_CONFIG_KEYS) <= ls.KNOWN
    with pytest.raises(ConfigError, match="unknown key"):
        ls.LoadSpec.from_entry({"topic": "t", "table": "x", "max_rows_per_file": 5})


def test_flags_reach_the_spec_through_the_declarations():
    args = _load_parser().parse_args(["t", "--partition-by", "hour(timestamp)", "--mode",
                                      "upsert", "--key-columns", "a,b"])
    spec = ls.LoadSpec(topic="t", table="x").with_overrides(**tl.layout_flags(args))
    assert spec.layout == tl.TableLayout(("hour(timestamp)",), "upsert", ("a", "b"))
    assert "partition_by" not in spec.defaulted
    entry = {"topic": "t", "table": "x", **tl.layout_entry_from_flags(args)}
    assert ls.LoadSpec.from_entry(entry).layout == spec.layout


def test_no_flag_given_leaves_every_layout_field_out():
    args = _load_parser().parse_args(["t"])
    assert tl.layout_entry_from_flags(args) == {}
    spec = ls.LoadSpec(topic="t", table="x").with_overrides(**tl.layout_flags(args))
    assert spec.defaulted >= {"partition_by"} and spec.layout == tl.TableLayout()


def test_a_fixed_field_left_out_takes_the_table_value_and_a_given_one_must_agree():
    prop = RecordedProperty(LOAD_PROPERTIES["partition_by"], FIXED, absent=())
    assert prop.settle(("day(timestamp)",), ("hour(ts)",), True, table="t",
                       flag="--partition-by") == ("hour(ts)",)
    assert prop.settle(("hour(ts)",), ("hour(ts)",), False, table="t",
                       flag="--partition-by") == ("hour(ts)",)
    with pytest.raises(ConfigError) as exc:
        prop.settle(("day(timestamp)",), ("hour(ts)",), False, table="t", flag="--partition-by")
    assert str(exc.value) == (
        'table t is loaded with kafkastore.load.partition-by=["hour(ts)"]; --partition-by '
        '["day(timestamp)"] conflicts with it (drop the flag to use the table\'s, or load '
        'into another table)')


def test_an_unknown_conflict_rule_is_refused():
    with pytest.raises(ConfigError, match="conflict rule"):
        RecordedProperty("x", "sometimes")


_FIELD = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
_PARTITION = st.one_of(_FIELD, st.builds(lambda t, c: f"{t}({c})",
                                         st.sampled_from(["identity", "day", "hour", "month"]),
                                         _FIELD))


@settings(max_examples=60, deadline=None)
@given(partition_by=st.lists(_PARTITION, max_size=3).map(tuple),
       upsert=st.booleans(), keys=st.lists(_FIELD, max_size=3, unique=True).map(tuple))
def test_the_layout_a_table_records_is_the_layout_maintain_reads_back(partition_by, upsert, keys):
    mode = "upsert" if upsert else "append"
    spec = ls.LoadSpec(topic="t", table="x", partition_by=partition_by, mode=mode,
                       key_columns=keys if upsert else ())
    layout = spec.layout
    recorded = {**tl.mode_properties(mode, layout.upsert_keys if upsert else ()),
                **spec.load_properties()}
    back = tl.TableLayout.of_properties(recorded)
    assert back.partition_by == layout.partition_by
    assert back.mode == mode and back.upsert_keys == layout.upsert_keys
    assert ls.stored_load(recorded)["partition_by"] == partition_by
    columns = ("topic", "partition", "offset", *keys)
    assert back.row_order(columns) == (layout.upsert_keys if upsert
                                       else ("topic", "partition", "offset"))


def test_the_cli_layout_flags_reach_one_table_and_pattern_loads(tmp_path):
    from pipelines.jobs.load import load_options_from_args
    from pipelines.jobs.load_many import load_many_options_from_args
    from pipelines.spec.job_config import Config

    cfg = Config(root="file:///r", warehouse=f"file://{tmp_path}/w",
                 loads=[{"topic": "orders", "table": "orders", "partition_by": ["hour(timestamp)"]}])
    load = _load_parser()
    one = load_options_from_args(load.parse_args(["orders", "--mode", "upsert",
                                                  "--key-columns", "id"]), cfg)["spec"]
    assert one.layout == tl.TableLayout(("hour(timestamp)",), "upsert", ("id",))
    many = load_many_options_from_args(load.parse_args(
        ["--topic-pattern", "o.*", "--table-template", "db.{topic}", "--partition-by",
         "day(timestamp)", "--partition-by", "partition"]), cfg)["spec"]
    assert many.spec_for("orders", "db.orders").layout.partition_by == ("day(timestamp)", "partition")
