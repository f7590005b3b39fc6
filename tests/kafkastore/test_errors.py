"""One error tree: every error class is defined once, in kafkastore/errors.py, and the
old import names still name the same class."""
from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

from kafkastore import errors

ROOT = pathlib.Path(__file__).resolve().parents[2]


def defined_exception_classes(path: pathlib.Path):
    """Public classes in ``path`` whose bases look like exceptions."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            bases = [ast.unparse(b) for b in node.bases]
            if any(b.endswith(("Error", "Exception", "Conflict", "Failed", "Rejected"))
                   for b in bases):
                yield node.name


def test_every_error_class_is_defined_in_errors_py():
    elsewhere = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for top in ("kafkastore", "pipelines", "dags")
        for path in (ROOT / top).rglob("*.py")
        if path != ROOT / "kafkastore" / "errors.py"
        for name in defined_exception_classes(path))
    assert elsewhere == []


def test_every_error_derives_from_the_root():
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert len(classes) > 30
    assert all(issubclass(c, errors.KafkaStoreError) for c in classes)


@pytest.mark.parametrize("module, name", [
    ("kafkastore.manifest", "InvalidUpdateError"),
    ("kafkastore.manifest", "RequirementFailedError"),
    ("kafkastore.manifest", "CorruptMetadataError"),
    ("kafkastore.format.segment", "TruncatedBatchError"),
    ("kafkastore.format.segment", "OffsetOrderError"),
    ("kafkastore.format.segment", "UnsupportedFormatError"),
    ("kafkastore.format.segment", "SegmentOffsetOverflowError"),
    ("kafkastore.format.offset_index", "CorruptIndexError"),
    ("kafkastore.protocol.wire.codec", "ProtocolError"),
    ("kafkastore.protocol.appender", "BatchRejected"),
    ("pipelines.quality", "QualityCheckFailed"),
    ("pipelines.spark_errors", "SparkJobError"),
])
def test_old_import_names_still_work(module, name):
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_data_loss_is_one_type_with_an_unchanged_message():
    # Load planning and the data source both raise DataLossError; a reader that catches
    # OffsetOutOfRangeError (Kafka's name for it) still catches it.
    assert issubclass(errors.DataLossError, errors.OffsetOutOfRangeError)
    assert not issubclass(errors.DataLossError, errors.WarehouseError)
    plain = errors.DataLossError("lost", log_start_offset=5, high_watermark=9,
                                 bounds_in_message=False)
    assert str(plain) == "lost" and (plain.log_start_offset, plain.high_watermark) == (5, 9)
    assert str(errors.DataLossError("lost", log_start_offset=5, high_watermark=9)) == \
        "lost (log start offset 5, high watermark 9)"
