"""The old import paths kept as alias modules, and the modules a file imports, read from the
code (tests/test_aliases.py checks the aliases, tests/test_layers.py that the library and
the jobs import none of them)."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("kafkastore", "pipelines")
#: How an alias module's docstring starts.
MARKER = "Moved to"


def is_alias(path: pathlib.Path) -> bool:
    """Whether a module is an alias: its docstring starts with ``Moved to``."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=True) or ""
    return doc.startswith(MARKER)


def alias_modules() -> list[pathlib.Path]:
    """Every alias module of kafkastore/ and pipelines/, by path."""
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            if is_alias(path)]


def module_name(path: pathlib.Path) -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
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
