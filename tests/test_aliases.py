"""Old import paths kept as thin aliases hold no code.

When a module moves (the redesign puts the flat folders into packages), its old path stays
for one release so that users' imports keep working. Such an alias module starts its
docstring with ``Moved to`` (for example ``"Moved to kafkastore.manifest.delta; this old
import path stays for one release."``) and may hold only imports, ``__all__``, plain
re-namings (``Broker = LogWriter``) and, for a module run with ``python -m``, an
``if __name__ == "__main__":`` block that calls the new module's entry point. Anything else
would let code grow back at the old path, where nobody looks for it.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("kafkastore", "pipelines")
MARKER = "Moved to"


def _alias_modules() -> list[pathlib.Path]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text()), clean=True) or ""
            if doc.startswith(MARKER):
                found.append(path)
    return found


def _allowed(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return isinstance(node.value.value, str)  # the docstring
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        value = node.value
        if isinstance(value, (ast.Name, ast.Attribute)):
            return True  # Broker = LogWriter
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
    if isinstance(node, ast.If):
        test = node.test
        is_main = (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
                   and test.left.id == "__name__")
        # the body may only call the entry point: main(), sys.exit(main()), raise SystemExit(main())
        return is_main and all(isinstance(s, (ast.Expr, ast.Raise, ast.Import, ast.ImportFrom))
                               for s in node.body)
    return False


def test_the_known_alias_is_found():
    # the marker convention is live: the manifest's old delta module is an alias
    assert ROOT / "kafkastore" / "manifest_delta.py" in _alias_modules()


@pytest.mark.parametrize("path", _alias_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_alias_module_holds_only_imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    extra = [f"line {n.lineno}: {ast.unparse(n).splitlines()[0]}"
             for n in tree.body if not _allowed(n)]
    assert not extra, f"{path.relative_to(ROOT)} is an alias module but holds code: {extra}"
    assert any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)


def test_alias_modules_import_what_they_name():
    """Each alias imports cleanly (a moved name that no longer exists fails here)."""
    import importlib
    for path in _alias_modules():
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        importlib.import_module(".".join(parts))
