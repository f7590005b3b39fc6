"""DESIGN.md section 1, enforced by reading the imports: the log library (kafkastore/,
its protocol server included) never imports Spark, Airflow, Great Expectations or the
jobs, not even inside a function."""
import ast
import pathlib
import textwrap

from tests.helpers.aliases import OLD_PATHS, imported_modules as imports_of, is_alias, old_paths

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
    assert sources == ["buffers.c", "columns.c", "crc.c", "decode.c", "encode.c", "keymap.c",
                       "module.c"]
    assert not any("parse_jsonl" in (ROOT / "kafkastore" / "format" / "native" / s).read_text()
                   for s in sources)
    assert "parse_jsonl" in (ROOT / "kafkastore" / "_jsonl_native.c").read_text()


# The third-party packages each layer may import, as docs/ARCHITECTURE.md "The layers" lists
# them (top-level import names). A new dependency of a layer is a line here and in the document.
THIRD_PARTY = {
    "kafkastore/format": {"pyarrow", "numpy", "cramjam", "lz4", "zstandard", "crc32c"},
    "kafkastore": {"pyarrow", "numpy", "fsspec", "s3fs", "yaml"},
    "kafkastore/protocol": {"kio", "pyarrow", "prometheus_client"},
    "kafkastore/schema_registry": {"fastavro", "jsonschema", "google", "proto_schema_parser",
                                   "antlr4"},
    "pipelines": {"pyspark", "pyarrow", "pyiceberg", "pandas", "fastavro", "google", "numpy",
                  "fsspec", "great_expectations", "py4j", "yaml"},
    "dags": {"airflow", "yaml"},
}
# Each layer may also import the layers below it (kafkastore/ includes format/).
BELOW = {
    "kafkastore/format": {"kafkastore.format", "kafkastore.errors"},
    "kafkastore": {"kafkastore"},
    "kafkastore/protocol": {"kafkastore"},
    "kafkastore/schema_registry": {"kafkastore"},
    "pipelines": {"kafkastore", "pipelines"},
    "dags": {"pipelines.config", "pipelines.spec"},
}


def _layer_files(layer: str):
    sub = {"kafkastore/format", "kafkastore/protocol", "kafkastore/schema_registry"}
    for path in (ROOT / layer).rglob("*.py"):
        rel = str(path.relative_to(ROOT))
        if layer == "kafkastore" and any(rel.startswith(s + "/") for s in sub):
            continue
        yield path


def test_each_layer_imports_what_the_architecture_document_says():
    import sys
    std = set(sys.stdlib_module_names) | {"__future__"}
    offending = []
    for layer, allowed in THIRD_PARTY.items():
        for path in _layer_files(layer):
            for name in imported_modules(path):
                top = name.split(".")[0]
                if top in std or top in allowed:
                    continue
                if top in {"kafkastore", "pipelines", "dags"}:
                    above = (layer == "kafkastore"
                             and path.relative_to(ROOT).as_posix() != "kafkastore/cli/serve.py"
                             and name.startswith(("kafkastore.protocol", "kafkastore.schema_registry")))
                    if (layer != "dags" and not above
                            and any(name == b or name.startswith(b + ".") for b in BELOW[layer])):
                        continue
                    if layer == "dags":
                        continue  # the DAG file's parse-time imports are checked by tests/dags
                offending.append(f"{path.relative_to(ROOT)}: {name}")
    assert sorted(offending) == []


# The log library's packages (and the root modules not yet in one), bottom first: each may
# import the foundation (LOG_FOUNDATION) and what is listed before it, never what is listed
# after it. read/ and write/ share a level and never import each other: reading the log
# does not depend on the writer. An entry "package.module" puts one module of a package on
# a level of its own (the log writer, write/log_writer, drives the housekeeper, so it sits
# above maintenance/, which writes segments through write/segments). The old paths' alias
# modules are not in the list, so the library itself imports the new paths. The protocol
# server is checked above (only kafkastore/cli/serve.py imports it).
LOG_FOUNDATION = ("errors", "clock", "threads", "storage", "layout", "commit", "format",
                  "_jsonl_native")
LOG_LEVELS = [("manifest",), ("cluster",), ("topics",), ("read", "write"), ("maintenance",),
              ("write.log_writer",), ("write.transactions",), ("job_commits",), ("groups",),
              ("cli",)]


def test_the_log_library_packages_import_only_downwards():
    level = {name: i for i, names in enumerate(LOG_LEVELS) for name in names}
    own_level = {ROOT / "kafkastore" / f"{name.replace('.', '/')}.py" for name in level if "." in name}
    offending = []
    for name, i in level.items():
        base = ROOT / "kafkastore" / name.replace(".", "/")
        paths = base.rglob("*.py") if base.is_dir() else [base.with_suffix(".py")]
        for path in (p for p in paths if p not in own_level or "." in name):
            for imported in imported_modules(path):
                parts = imported.split(".")
                if parts[0] != "kafkastore" or len(parts) < 2 or parts[1] in LOG_FOUNDATION:
                    continue
                if parts[1] in {"protocol", "schema_registry"}:
                    continue
                target = ".".join(parts[1:3]) if ".".join(parts[1:3]) in level else parts[1]
                if target == name or level.get(target, len(LOG_LEVELS)) < i:
                    continue
                offending.append(f"{path.relative_to(ROOT)}: {imported}")
    assert sorted(offending) == []


def test_the_dag_file_parses_without_the_jobs_spark_or_iceberg(tmp_path):
    """docs/ARCHITECTURE.md: the DAG file stays thin. Parsing it (what Airflow's scheduler
    does every few seconds) reads the config and the typed load specs only; the jobs,
    pyiceberg, pyarrow and Spark are imported inside the tasks."""
    import os
    import subprocess
    import sys

    code = ("import runpy, sys; runpy.run_path('dags/kafkastore_dags.py'); "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'pyspark', 'pyiceberg', 'pyarrow', 'pandas', 'py4j', 'great_expectations'} "
            "or (m.startswith('pipelines.') and m not in "
            "{'pipelines.config', 'pipelines.load_spec', 'pipelines.table_layout', 'pipelines.spec', "
            "'pipelines.spec.job_config', 'pipelines.spec.load_spec', 'pipelines.spec.table_layout', "
            "'pipelines.spec.topic_routing', 'pipelines.old_paths', "
            "'pipelines.warehouse', 'pipelines.warehouse.properties'}))))")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == []


def test_the_job_specs_import_only_the_stdlib_yaml_and_the_light_log_library():
    """pipelines/spec/ is what the DAG file parses with: of third parties only yaml, of
    pipelines only itself and the table property names (and, inside a function, the
    decoders it names for a spec that asks for them), never pyspark, pyiceberg or pyarrow."""
    import sys
    std = set(sys.stdlib_module_names) | {"__future__"}
    light = ("kafkastore.errors", "kafkastore.cli.log_config", "kafkastore.layout")
    offending = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "pipelines" / "spec").rglob("*.py")
        for name in imported_modules(path)
        if not (name.split(".")[0] in std | {"yaml"} or name.startswith("pipelines.spec")
                or name == "pipelines.warehouse.properties"
                or name.startswith(light) or name.startswith(("pipelines.cdc", "pipelines.decoding"))))
    assert offending == []

# The jobs' packages, bottom first: the job specs, the Spark source (options, planning,
# schemas), the jobs (the executors' reader and writer, the driver's write engine, the
# jobs). A package never imports one listed after it, nor the job modules still at the
# root of pipelines/.
PIPELINE_JOB_MODULES = ("pipelines.load", "pipelines.reprocess", "pipelines.upsert",
                        "pipelines.registry_load", "pipelines.maintain", "pipelines.jobs")


def test_the_spark_source_does_not_import_the_jobs():
    offending = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "pipelines" / "source").rglob("*.py")
        for name in imported_modules(path)
        if any(name == m or name.startswith(m + ".") for m in PIPELINE_JOB_MODULES))
    assert offending == []


def test_the_executors_writer_does_not_import_the_driver_side():
    """jobs/executor_io.py is what runs on the executors: below the write engine and the
    jobs that use it (registry loads import it, so it must not import them)."""
    driver = ("pipelines.jobs.write_engine", "pipelines.load", "pipelines.reprocess",
              "pipelines.registry_load")
    path = ROOT / "pipelines" / "jobs" / "executor_io.py"
    assert [n for n in imported_modules(path) if n.startswith(driver)] == []

def test_the_protocol_server_does_not_import_the_schema_registry_at_module_level():
    """The registry is started by the server when asked; nothing in the log library or the
    protocol imports it at the top of a module (so `serve` without it loads no Avro, Protobuf
    or JSON Schema machinery)."""
    offending = []
    for path in (ROOT / "kafkastore").rglob("*.py"):
        if "schema_registry" in path.parts:
            continue
        tree = __import__("ast").parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = ([a.name for a in node.names] if isinstance(node, __import__("ast").Import)
                     else [node.module or ""] if isinstance(node, __import__("ast").ImportFrom) else [])
            if any("schema_registry" in n for n in names):
                offending.append(str(path.relative_to(ROOT)))
    assert offending == []


# The protocol server's packages, bottom first: wire/ (Kafka's bytes) imports nothing else
# of the protocol; the coordinators' state machines and the broker's caches import only
# wire/ (the caches also the pure placement rules); the API families are imported only by
# the list of families, the server, the services' annotations and the connection (which
# answers an ApiVersions of a version the table does not serve).
PROTOCOL = "kafkastore.protocol"
PROTOCOL_BELOW = {
    "wire": (f"{PROTOCOL}.wire",),
    "coordinators": (f"{PROTOCOL}.wire", f"{PROTOCOL}.coordinators"),
    "caches": (f"{PROTOCOL}.wire", f"{PROTOCOL}.caches", f"{PROTOCOL}.placement"),
}
APIS_IMPORTED_BY = {"families.py", "server.py", "services.py", "connection.py"}


def _is_alias(path: pathlib.Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.startswith("Moved to")


def test_the_protocol_packages_import_only_downwards():
    offending = []
    for package, allowed in PROTOCOL_BELOW.items():
        for path in (ROOT / "kafkastore" / "protocol" / package).rglob("*.py"):
            for name in imported_modules(path):
                if name.startswith(PROTOCOL + ".") and not any(
                        name == a or name.startswith(a + ".") for a in allowed):
                    offending.append(f"{path.relative_to(ROOT)}: {name}")
    for path in (ROOT / "kafkastore" / "protocol").glob("*.py"):
        if path.name in APIS_IMPORTED_BY or _is_alias(path):
            continue
        offending += [f"{path.relative_to(ROOT)}: {name}" for name in imported_modules(path)
                      if name.startswith(f"{PROTOCOL}.apis")]
    assert sorted(offending) == []


# Where the code lives: every module of these trees imports the homes, never an old path
# (the table of old paths and the package ``__init__``s that keep a moved module's names are
# for users, for one release; a moved name then has one home and the old paths can go).
CODE_TREES = ("kafkastore", "pipelines", "dags", "bench", "tests")
#: The tests of the old paths and of this check import them on purpose (or plant them).
OLD_PATH_TESTS = {"tests/test_aliases.py", "tests/test_layers.py"}


def scripts_in(path: pathlib.Path) -> list[str]:
    """The Python programs a file holds as string literals (the job script a test runs in a
    child process): each string that parses as Python with an import in it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            code = textwrap.dedent(node.value)
            try:
                tree = ast.parse(code)
            except SyntaxError:
                continue
            if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)):
                found.append(code)
    return found


def old_path_imports(paths, scratch: pathlib.Path, root: pathlib.Path = ROOT) -> set[str]:
    """``"file: old path"`` for every import of an old path in ``paths`` (files of the tree at
    ``root``): at the top, inside a function, and in a script a string holds (``scratch`` is a
    folder to write it to)."""
    aliases = old_paths()
    found = set()
    for path in paths:
        rel = path.relative_to(root).as_posix()
        if is_alias(path) or rel in OLD_PATH_TESTS:
            continue
        names = imports_of(path, rel.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
        for i, code in enumerate(scripts_in(path)):
            script = scratch / f"script_{i}.py"
            script.write_text(code, encoding="utf-8")
            names |= imports_of(script, "script")
        found |= {f"{rel}: {name}" for name in names & aliases}
    return found


def test_no_module_imports_an_old_path(tmp_path):
    """The library, the jobs, the DAGs, the benchmarks and the tests import the modules where
    the code lives, not an old path (tests/test_aliases.py tests the old paths)."""
    paths = [p for top in CODE_TREES for p in sorted((ROOT / top).rglob("*.py"))]
    assert len(paths) > 400
    assert sorted(old_path_imports(paths, tmp_path)) == []


def test_the_alias_check_sees_a_planted_import(tmp_path):
    """An old path is seen in every form: ``from`` one (relative too), a plain ``import``,
    a function-local import, ``from package import alias``, and one in a job script held in
    a string; a submodule of an alias package (``kafkastore.topics.admin``) is a home, not an
    old path. The tests of the old paths themselves are left out."""
    planted = tmp_path / "planted.py"
    planted.write_text("from ..reader import PartitionReader\nimport kafkastore.merge\n"
                       "from kafkastore import acls\nfrom ..topics.admin import load_topic\n"
                       "def f():\n    from kafkastore.topics import list_topics\n"
                       "JOB = '''\n    import sys\n    from pipelines import iceberg as ice\n'''\n")
    aliases = old_paths()
    found = imports_of(planted, "kafkastore.protocol.planted") & aliases
    assert found == {"kafkastore.reader", "kafkastore.merge", "kafkastore.acls", "kafkastore.topics"}
    # the whole check, on a tree of its own: the script too; the old paths' own tests are left out
    package = tmp_path / "tree" / "kafkastore" / "protocol"
    package.mkdir(parents=True)
    (tmp_path / "tree" / "tests").mkdir()
    (package / "planted.py").write_text(planted.read_text())
    own_test = tmp_path / "tree" / "tests" / "test_aliases.py"
    own_test.write_text("import kafkastore.reader\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert old_path_imports([package / "planted.py", own_test], scratch, tmp_path / "tree") == {
        f"kafkastore/protocol/planted.py: {name}" for name in found | {"pipelines.iceberg"}}
