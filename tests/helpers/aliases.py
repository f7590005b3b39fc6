"""The old import paths (the table of kafkastore/old_paths.py and pipelines/old_paths.py,
and the package ``__init__``s that keep a moved module's names), and the modules a file
imports, read from the code (tests/test_aliases.py checks the old paths, tests/test_layers.py
that no module of the library, the jobs, the DAGs, the benchmarks or the tests imports one)."""
from __future__ import annotations

import ast
import pathlib

from kafkastore.old_paths import OLD_PATHS as LOG_OLD_PATHS
from pipelines.old_paths import OLD_PATHS as JOB_OLD_PATHS

#: Every old module path served by the import hook -> its homes.
OLD_PATHS = {**LOG_OLD_PATHS, **JOB_OLD_PATHS}
ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("kafkastore", "pipelines")
#: How the docstring of a package ``__init__`` that keeps a moved module's names starts.
MARKER = "Moved to"


def is_alias(path: pathlib.Path) -> bool:
    """Whether a file is an alias: its docstring starts with ``Moved to`` (only package
    ``__init__``s may be: a package whose old module became the package keeps its names)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=True) or ""
    return doc.startswith(MARKER)


def alias_modules() -> list[pathlib.Path]:
    """Every file of kafkastore/ and pipelines/ marked as an alias, by path."""
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            if is_alias(path)]


def old_paths() -> set[str]:
    """Every old module path: the table's, and the alias package ``__init__``s'."""
    return set(OLD_PATHS) | {module_name(p) for p in alias_modules()}


def module_name(path: pathlib.Path) -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    if name in OLD_PATHS:
        return True
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(path: pathlib.Path, name: str | None = None) -> set[str]:
    """The modules a file imports, inside functions too: ``import a.b`` is ``a.b``; ``from X
    import n`` is ``X.n`` when that is a module (a submodule of a package), else ``X``, with
    relative ``X`` resolved from the file's module ``name`` (default: where it lies)."""
    name = name or module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                base = ".".join((*base, node.module) if node.module else base)
            else:
                base = node.module or ""
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if _is_module(sub) else base)
    return found
