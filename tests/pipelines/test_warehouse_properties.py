"""Table properties and snapshot summary keys have one home: pipelines/warehouse/properties.py.

Their values are stored in tables that exist, so they are pinned here; a ``"kafkastore.``
string literal used as a key anywhere else in ``pipelines/`` fails (module paths such as
``"kafkastore.errors"``, logger names and docstrings are not keys).
"""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

from pipelines.warehouse import properties

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOME = ROOT / "pipelines" / "warehouse" / "properties.py"
PREFIX = "kafkastore."

# The stored names, as tables written by every earlier version carry them.
STORED = {
    "RETRY_PROPERTY": "commit.retry.num-retries",
    "FORMAT_VERSION_PROPERTY": "format-version",
    "PARQUET_CODEC_PROPERTY": "write.parquet.compression-codec",
    "MODE_PROPERTY": "kafkastore.mode",
    "KEY_COLUMNS_PROPERTY": "kafkastore.key-columns",
    "LOAD_PROPERTY_PREFIX": "kafkastore.load.",
    "OFFSETS_KEY": "kafkastore.offsets",
    "RUN_ID_KEY": "kafkastore.run-id",
    "OPERATION_KEY": "kafkastore.operation",
    "RANGES_KEY": "kafkastore.ranges",
    "GAPS_KEY": "kafkastore.gaps",
    "AUDIT_KEY": "kafkastore.audit",
    "SCHEMA_IDS_KEY": "kafkastore.schema-ids",
    "KEY_SCHEMA_IDS_KEY": "kafkastore.key-schema-ids",
    "VALIDATED_TAG": "validated",
}


def test_stored_names_keep_their_values():
    assert {name: getattr(properties, name) for name in STORED} == STORED
    assert properties.LOAD_PROPERTIES == {
        "value_format": "kafkastore.load.value-format",
        "value_schema": "kafkastore.load.value-schema",
        "value_schema_file": "kafkastore.load.value-schema-file",
        "decode": "kafkastore.load.decode",
        "cdc": "kafkastore.load.cdc",
        "partition_by": "kafkastore.load.partition-by",
    }
    assert properties.TABLE_PROPERTIES == {"commit.retry.num-retries": "0", "format-version": "2",
                                           "write.parquet.compression-codec": "zstd"}
    assert properties.OPERATIONS == ("load", "reprocess")
    assert properties.CARRY_OPERATIONS == ("maintain",)


def _kafkastore_module(text: str) -> bool:
    """``kafkastore.errors`` or ``kafkastore.errors.SegmentMismatchError``: a path into
    the package, not a key."""
    parts = text.split(".")
    path = ROOT / "kafkastore"
    for part in parts[1:]:
        if (path / f"{part}.py").exists():
            return True
        if not (path / part / "__init__.py").exists():
            return False
        path = path / part
    return True


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def _logger_names(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "getLogger":
                out.update(id(a) for a in node.args)
    return out


def key_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal (f-strings by their leading text) that
    starts with ``kafkastore.`` and is a key: not a docstring, a logger name or a path
    into the kafkastore package."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _logger_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            leading = isinstance(head, ast.Constant) and isinstance(head.value, str)
            text = head.value if leading else ""
            skip.update(id(v) for v in node.values)
            if text.startswith(PREFIX) and not _kafkastore_module(text.rstrip(".")):
                found.append((node.lineno, text + "{...}"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in skip and node.value.startswith(PREFIX)
              and not _kafkastore_module(node.value)):
            found.append((node.lineno, node.value))
    return sorted(found)


def test_the_check_sees_keys_and_only_keys():
    source = '''
"""Docstring mentioning "kafkastore.offsets"."""
import logging
log = logging.getLogger("kafkastore.broker")
def f(summary, props, k):
    """``kafkastore.run-id`` in a docstring."""
    a = summary.get("kafkastore.operation")
    b = props[f"kafkastore.load.{k}"]
    c = "kafkastore.errors.SegmentMismatchError"
    d = "see kafkastore.offsets"
    e = "kafkastore.manifest"
    return summary.get('kafkastore.run-id')
'''
    assert key_literals(source) == [(7, "kafkastore.operation"), (8, "kafkastore.load.{...}"),
                                    (12, "kafkastore.run-id")]


def _pipelines_modules() -> list[pathlib.Path]:
    return sorted(p for p in (ROOT / "pipelines").rglob("*.py") if p != HOME)


def test_no_property_or_summary_key_literal_outside_its_home():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {text!r}"
                 for path in _pipelines_modules()
                 for line, text in key_literals(path.read_text())]
    assert offenders == [], ("table properties and snapshot summary keys are defined once, in "
                             "pipelines/warehouse/properties.py; import the name:\n"
                             + "\n".join(offenders))


@pytest.mark.parametrize("module", ["pipelines.warehouse", "pipelines.warehouse.properties"])
def test_the_properties_load_neither_iceberg_nor_arrow(module):
    # The DAG file's job specs import the properties at parse time.
    code = (f"import sys, {module}; "
            "print(sorted(m for m in ('pyiceberg', 'pyarrow', 'pyspark', 'pandas') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
