"""DESIGN.md section 1, enforced by reading the imports: the log library (kafkastore/,
its protocol server included) never imports Spark, Airflow, Great Expectations or the
jobs, not even inside a function."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = {"pyspark", "airflow", "great_expectations", "pipelines", "dags",
             # the `spark` extra: installing just the log library does not install them
             # (fastavro is not among them: the broker's schema registry parses Avro)
             "pyiceberg", "pandas", "py4j"}


def imported_modules(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.ImportFrom) and node.level:
            # `from .x import y` in a/b/m.py is a.b.x (a.b.x.y when x is empty: a.b.y)
            package = path.resolve().relative_to(ROOT).parent.parts
            package = package[:len(package) - node.level + 1]
            yield ".".join((*package, node.module) if node.module else
                           (*package, *(a.name for a in node.names[:1])))


def test_the_log_library_imports_no_jobs_spark_or_airflow():
    offending = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "kafkastore").rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in FORBIDDEN)
    assert offending == []


def test_the_byte_formats_import_only_each_other_and_the_errors():
    """kafkastore/format/ is pure functions over bytes: of kafkastore it may use only
    itself and kafkastore.errors (no storage, manifest, broker or protocol), so it can
    be read, tested and reused on its own."""
    offending = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "kafkastore" / "format").rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] == "kafkastore"
        and not name.startswith(("kafkastore.format", "kafkastore.errors")))
    assert offending == []


def test_the_jobs_import_neither_the_dags_nor_airflow():
    offending = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "pipelines").rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in {"dags", "airflow"})
    assert offending == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from pipelines.load import run_load\n    import pyspark\n")
    assert list(imported_modules(f)) == ["pipelines.load", "pyspark"]


def test_no_test_module_imports_another_test_module_or_conftest():
    """Shared test code lives in tests/helpers/ (and tests/faults.py), fixtures in conftest.py."""
    offending = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "tests").rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] == "tests"
        and name.rsplit(".", 1)[-1].startswith(("test_", "conftest")))
    assert offending == []


def test_one_switch_turns_the_c_extensions_off():
    """``KAFKASTORE_NO_EXTENSIONS`` is read in one place, kafkastore/format/extensions.py;
    every module with a fast path asks it (so the switch cannot half-apply)."""
    readers = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "kafkastore").rglob("*.py")
                     if "KAFKASTORE_NO_EXTENSIONS" in path.read_text(encoding="utf-8")
                     .split('"""', 2)[-1])  # past the module docstring
    assert readers == ["kafkastore/format/extensions.py"]


def test_the_c_sources_are_cut_by_concern():
    """The byte-format kernel is one extension built from one source per concern, and the
    JSON-lines parser (produce input) is not among them."""
    sources = sorted(p.name for p in (ROOT / "kafkastore" / "format" / "native").glob("*.c"))
    assert sources == ["buffers.c", "columns.c", "crc.c", "decode.c", "encode.c", "module.c"]
    assert not any("parse_jsonl" in (ROOT / "kafkastore" / "format" / "native" / s).read_text()
                   for s in sources)
    assert "parse_jsonl" in (ROOT / "kafkastore" / "_jsonl_native.c").read_text()
