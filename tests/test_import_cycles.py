"""No import cycle among the modules of kafkastore/ and pipelines/, read from the code.

Every import counts, the ones inside functions too: a function-local import hides a cycle
from the interpreter at start-up, not from the design (the two modules still cannot be
understood, tested or moved one without the other). Relative imports are resolved, and
``from package import name`` is an edge to ``package.name`` when that is a module, else to
the package. Imports under ``if TYPE_CHECKING:`` are never run (annotations only) and are
left out. Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those
implicit edges are left out (a submodule importing its sibling while its package's
``__init__`` runs is not a cycle in the design).

A cycle is a strongly connected component of more than one module. The ones that exist
today are listed in ``KNOWN_CYCLES``; the redesign removes them. The test fails on a
cycle not in the list, and on an entry of the list that is no longer exactly a component
(so the list only shrinks: when a cycle is broken or loses a member, the entry goes or
gets smaller in the same commit).

``python tests/test_import_cycles.py`` prints the components and the number of
function-local imports per package.
"""
from __future__ import annotations

import ast
import pathlib
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("kafkastore", "pipelines")

# The cycles that exist today, each removed by the redesign (then its entry goes).
KNOWN_CYCLES: list[frozenset[str]] = [
]


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b``."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(name: str, path: pathlib.Path) -> tuple[str, ...]:
    """The package a module's relative imports start from."""
    parts = tuple(name.split("."))
    return parts if path.name == "__init__.py" else parts[:-1]


def imports_of(path: pathlib.Path, name: str):
    """Every import in a module, as ``(target, names, local)``: ``import x.y`` is
    ``("x.y", [], local)``, ``from X import a, b`` is ``("X", ["a", "b"], local)`` with
    relative ``X`` resolved; ``local`` is true inside a function (a module-level ``if`` or
    ``try``, for TYPE_CHECKING or an optional extra, is not local)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    local = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local.update(id(n) for n in ast.walk(node) if n is not node)
    annotations_only = {id(n) for node in ast.walk(tree) if _is_type_checking_block(node)
                        for child in node.body for n in ast.walk(child)}
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], id(node) in local
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(name, path)
                base = base[:len(base) - node.level + 1]
                target = ".".join((*base, node.module) if node.module else base)
            else:
                target = node.module or ""
            yield target, [a.name for a in node.names], id(node) in local


def _is_type_checking_block(node) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): imports for annotations only,
    never run, so no edge of the import graph (its ``else`` branch is run and counted)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def resolve(candidate: str, modules: set[str]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    parts = candidate.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in modules:
            return prefix
    return None


def package_key(name: str) -> str:
    """The package a module is counted under: the sub-packages of kafkastore apart."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "kafkastore":
        return ".".join(parts[:2])
    return parts[0]


def scan(root: pathlib.Path, packages=PACKAGES):
    """The module graph of ``packages`` under ``root`` and, per package, the number of
    function-local imports of modules of ``packages``: ``(graph, local)`` with ``graph``
    ``{module: set(imported modules)}`` and ``local`` a Counter."""
    files = {module_name(p, root): p
             for package in packages for p in sorted((root / package).rglob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    local: Counter = Counter()
    for name, path in files.items():
        for target, names, is_local in imports_of(path, name):
            # the count is of imports of our own modules (the ones that can hide a cycle)
            local[package_key(name)] += is_local and target.split(".")[0] in packages
            found = set()
            for imported in names:
                # `from pkg import mod` imports the module pkg.mod; `from mod import x` mod
                submodule = f"{target}.{imported}"
                found.add(submodule if submodule in modules else resolve(target, modules))
            if not names:
                found.add(resolve(target, modules))
            graph[name].update(found - {None, name})
    return graph, local


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's components with more than one member (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(frozenset(members))
    return found


def cycle_problems(cycles: list[frozenset[str]], known: list[frozenset[str]]) -> list[str]:
    """New cycles, and known ones that are no longer exactly a component."""
    problems = [f"new import cycle: {sorted(c)}" for c in cycles if c not in known]
    problems += [f"KNOWN_CYCLES entry no longer a cycle (remove or shrink it): {sorted(k)}"
                 for k in known if k not in cycles]
    return problems


def test_no_import_cycle_beyond_the_known_ones():
    graph, _ = scan(ROOT)
    assert cycle_problems(strongly_connected(graph), KNOWN_CYCLES) == []


def test_the_known_cycles_are_distinct():
    assert len(set(KNOWN_CYCLES)) == len(KNOWN_CYCLES)
    assert all(len(k) > 1 for k in KNOWN_CYCLES)


def _write(root: pathlib.Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_new_cycle_through_a_function_local_import_is_reported(tmp_path):
    """A synthetic package: a -> b at the top, b -> a inside a function (relative and
    ``from package import module`` forms), c -> a only. One cycle {a, b}."""
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/a.py", "from . import b\n")
    _write(tmp_path, "pkg/b.py", "def f():\n    from .a import thing\n    return thing\n")
    _write(tmp_path, "pkg/c.py", "import pkg.a\n")
    graph, local = scan(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert local["pkg"] == 1
    cycles = strongly_connected(graph)
    assert cycles == [frozenset({"pkg.a", "pkg.b"})]
    assert cycle_problems(cycles, []) == ["new import cycle: ['pkg.a', 'pkg.b']"]
    assert cycle_problems(cycles, [frozenset({"pkg.a", "pkg.b"})]) == []


def test_imports_for_annotations_only_are_no_edge(tmp_path):
    """``if TYPE_CHECKING:`` imports are never run; the ``else`` branch and a plain ``if``
    are."""
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/a.py", "from . import b\n")
    _write(tmp_path, "pkg/b.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                 "    from .a import A\nelse:\n    from . import c\n")
    _write(tmp_path, "pkg/c.py", "import typing\nif typing.TYPE_CHECKING:\n    import pkg.a\n"
                                 "if True:\n    import pkg.b\n")
    graph, _ = scan(tmp_path, ("pkg",))
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.b"}
    assert strongly_connected(graph) == [frozenset({"pkg.b", "pkg.c"})]


def test_a_known_cycle_that_is_gone_or_smaller_is_reported(tmp_path):
    """The list only shrinks: a broken cycle's entry, or one with a member too many, fails."""
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/a.py", "from pkg import b\n")
    _write(tmp_path, "pkg/b.py", "import pkg.a as a\n")
    _write(tmp_path, "pkg/c.py", "")
    cycles = strongly_connected(scan(tmp_path, ("pkg",))[0])
    assert cycles == [frozenset({"pkg.a", "pkg.b"})]
    assert cycle_problems(cycles, [frozenset({"pkg.a", "pkg.b", "pkg.c"})]) == [
        "new import cycle: ['pkg.a', 'pkg.b']",
        "KNOWN_CYCLES entry no longer a cycle (remove or shrink it): "
        "['pkg.a', 'pkg.b', 'pkg.c']"]
    assert cycle_problems([], [frozenset({"pkg.a", "pkg.b"})]) == [
        "KNOWN_CYCLES entry no longer a cycle (remove or shrink it): ['pkg.a', 'pkg.b']"]


def test_the_scan_sees_every_module_and_its_imports():
    """Sanity: the real tree is read (a module known to import another is linked to it)."""
    graph, local = scan(ROOT)
    assert "kafkastore.write.segments" in graph and "pipelines.jobs.load" in graph
    assert "kafkastore.manifest" in graph["kafkastore.write.segments"]
    assert "pipelines.source.planning" in graph["pipelines.jobs.load"]
    assert sum(local.values()) > 0


# Function-local imports of our own modules: each one says why it is not at the top of its
# module, with a ``# lazy: <reason>`` comment on its line, in the comment lines right above
# it, or above the run of function-local imports it is part of (start-up time, an optional
# extra, pyspark on the driver only, a cycle the design has not broken yet). An import with
# no reason is hoisted, or gets one.
LAZY = "# lazy:"

# Files other work is still editing, with function-local imports that give no reason yet:
# not checked until then. The list only shrinks: a file leaves it when its imports are
# explained (the test below fails on a file listed here that no longer needs it).
EXCUSED_FROM_LAZY_REASONS = (
)


def _own_local_imports(tree: ast.AST, packages) -> list:
    """The function-local ``import``/``from`` statements of modules of ``packages`` (relative
    imports included), in line order."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for child in ast.walk(node):
            if isinstance(child, ast.Import):
                own = any(a.name.split(".")[0] in packages for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                own = bool(child.level) or (child.module or "").split(".")[0] in packages
            else:
                continue
            if own:
                found.append(child)
    return sorted({id(n): n for n in found}.values(), key=lambda n: n.lineno)


def _comment_above_says_lazy(lines: list[str], lineno: int) -> bool:
    """The comment lines right above line ``lineno`` (1-based) hold a ``# lazy:``."""
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        if LAZY in lines[index]:
            return True
        index -= 1
    return False


def unexplained_local_imports(path: pathlib.Path, packages=PACKAGES) -> list[int]:
    """The lines of the function-local imports of our own modules in ``path`` that give no
    reason: no ``# lazy:`` on the statement's lines, in the comment lines right above it,
    or above the run of function-local imports (one right after another) it ends."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    explained_run: dict[int, bool] = {}  # end line of an import -> its run has a reason
    missing = []
    for node in _own_local_imports(ast.parse(text, str(path)), packages):
        own = any(LAZY in line for line in lines[node.lineno - 1:node.end_lineno])
        above = _comment_above_says_lazy(lines, node.lineno)
        run = explained_run.get(node.lineno - 1, False)
        explained_run[node.end_lineno] = above or run
        if not (own or above or run):
            missing.append(node.lineno)
    return missing


def test_every_function_local_import_of_our_modules_says_why():
    missing = [f"{path.relative_to(ROOT).as_posix()}:{line}"
               for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
               if path.relative_to(ROOT).as_posix() not in EXCUSED_FROM_LAZY_REASONS
               for line in unexplained_local_imports(path)]
    assert missing == [], ("hoist these imports to the top of their module, or say why they "
                           "are function-local with a '# lazy: <reason>' comment")


def test_the_excused_files_are_only_files_that_still_need_it():
    """Each excused file exists and still has an unexplained function-local import (the list
    only shrinks)."""
    stale = [rel for rel in EXCUSED_FROM_LAZY_REASONS
             if not (ROOT / rel).is_file() or not unexplained_local_imports(ROOT / rel)]
    assert stale == []


def test_an_unexplained_function_local_import_is_reported(tmp_path):
    """A planted import without a reason is found; trailing, above-the-line and
    above-the-run comments explain; third-party and module-level imports are out of scope."""
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/a.py", (
        "import json\n"
        "from . import b\n"
        "def f():\n"
        "    import pkg.b  # lazy: start-up\n"
        "    # lazy: an optional extra, said over\n"
        "    #   two lines\n"
        "    from .b import x\n"
        "    from pkg.c import (y,\n"
        "                       z)\n"
        "    import os\n"
        "    from .b import planted\n"
        "def g():\n"
        "    from pkg import c  # lazy: a reason\n"
        "    from pkg import d\n"
        "    return lambda: __import__('pkg')\n"))
    assert unexplained_local_imports(tmp_path / "pkg" / "a.py", ("pkg",)) == [11, 14]


if __name__ == "__main__":
    graph, local = scan(ROOT)
    for cycle in sorted(strongly_connected(graph), key=len, reverse=True):
        print(len(cycle), sorted(cycle))
    print("function-local imports per package:", dict(sorted(local.items())),
          "total", sum(local.values()))
    unexplained = {path.relative_to(ROOT).as_posix(): lines
                   for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
                   for lines in [unexplained_local_imports(path)] if lines}
    print("without a '# lazy:' reason:", sum(map(len, unexplained.values())), unexplained)
