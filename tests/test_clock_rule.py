"""One clock (kafkastore/clock.py), injected from the top: library code below the entry
points never reads the system clock itself, so tests can drive time and every
component of one process agrees on it. Enforced by reading the code: a reference to
``time.time``, ``time.time_ns``, ``time.monotonic``, ``time.monotonic_ns``,
``time.gmtime()``/``time.localtime()`` without an argument, or ``datetime.now``/
``utcnow``/``date.today`` (through any import alias) is a direct read, and so is a
default argument such as ``clock=time.time``.

Not reads of time in this sense: ``time.sleep`` (a wait), ``time.perf_counter`` (a
profiling timer for request-time metrics), ``asyncio`` timeouts.
"""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: Where the clock is made or chosen: the clock itself and the entry points.
ENTRY_POINTS = {
    "kafkastore/clock.py": "the one place that reads the system clock",
    "kafkastore/cli.py": "entry point (CLI)",
    "pipelines/cli.py": "entry point (jobs' CLI)",
    "pipelines/spark_errors.py": "names the CLI's failure log file (entry point side)",
}

#: Files allowed to read the system clock while they are being converted (none now); an
#: entry goes when its file is converted (test_pending_files_still_read_the_clock says so).
PENDING: dict[str, str] = {}

_TIME_READS = {"time", "time_ns", "monotonic", "monotonic_ns"}
_TIME_READS_WITHOUT_ARG = {"gmtime", "localtime", "ctime", "asctime", "strftime"}
_DATETIME_READS = {"now", "utcnow", "today"}


def clock_reads(path: pathlib.Path) -> list[str]:
    """``line: expression`` of every direct read of the system clock in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    time_names, datetime_names, bare = set(), set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "time":
                    time_names.add(a.asname or "time")
                elif a.name == "datetime":
                    datetime_names.add((a.asname or "datetime") + ".datetime")
                    datetime_names.add((a.asname or "datetime") + ".date")
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for a in node.names:
                if node.module == "time" and a.name in _TIME_READS | _TIME_READS_WITHOUT_ARG:
                    bare[a.asname or a.name] = a.name
                elif node.module == "datetime" and a.name in ("datetime", "date"):
                    datetime_names.add(a.asname or a.name)
    calls_without_args = {id(n.func) for n in ast.walk(tree)
                          if isinstance(n, ast.Call) and not n.args and not n.keywords}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = ast.unparse(node.value)
            if owner in time_names and (node.attr in _TIME_READS or (
                    node.attr in _TIME_READS_WITHOUT_ARG and id(node) in calls_without_args
                    and node.attr != "strftime")):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
            elif owner in datetime_names and node.attr in _DATETIME_READS:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Name) and node.id in bare and isinstance(node.ctx, ast.Load):
            if bare[node.id] in _TIME_READS or id(node) in calls_without_args:
                found.append(f"{node.lineno}: {node.id}")
    return sorted(set(found), key=lambda s: int(s.split(":")[0]))


def library_files():
    for top in ("kafkastore", "pipelines"):
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def test_library_code_reads_time_only_through_the_injected_clock():
    offending = [f"{rel}:{read}" for rel, path in library_files()
                 if rel not in ENTRY_POINTS and rel not in PENDING
                 for read in clock_reads(path)]
    assert offending == [], (
        "read time through a kafkastore.clock.Clock passed down from the entry point "
        "(a `clock` argument, or `storage.clock`), not the system clock")


def test_pending_files_still_read_the_clock():
    """The PENDING list only shrinks: a converted file must leave it (and stay clean)."""
    done = [rel for rel in PENDING
            if (ROOT / rel).exists() and not clock_reads(ROOT / rel)]
    assert done == [], f"converted: remove {done} from PENDING in tests/test_clock_rule.py"


def test_the_rule_sees_every_spelling(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import time\nimport time as _t\nimport datetime as dt\n"
        "from time import monotonic as mono, gmtime\nfrom datetime import datetime\n"
        "def f(clock=time.time):\n"
        "    a = _t.monotonic_ns()\n    b = mono()\n    c = dt.datetime.now()\n"
        "    d = datetime.utcnow()\n    e = time.gmtime()\n    g = gmtime()\n"
        "    time.sleep(0.1)\n    h = time.perf_counter()\n    i = time.gmtime(5)\n"
        "    j = dt.date.today()\n    k = time.time_ns()\n"
        "    return time.strftime('%Y', time.gmtime(0))\n")
    assert clock_reads(src) == [
        "6: time.time", "7: _t.monotonic_ns", "8: mono", "9: dt.datetime.now",
        "10: datetime.utcnow", "11: time.gmtime", "12: gmtime", "16: dt.date.today",
        "17: time.time_ns"]
