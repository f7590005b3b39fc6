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
import re

import pytest

from tests.helpers.aliases import ROOT, alias_modules as _alias_modules


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
    # the protocol's flat paths, moved into wire/, apis/, coordinators/, caches/
    assert ROOT / "kafkastore" / "protocol" / "api_txn.py" in _alias_modules()


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


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _homes(path: pathlib.Path) -> list[str]:
    """The modules an alias's docstring says its code moved to: in its first clause (``Moved
    to A (...) and B (...);``), every dotted name that is itself a module
    (``pipelines.warehouse.properties.VALIDATED_TAG`` names a constant, not a home)."""
    import importlib.util
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=True) or ""
    homes = []
    for name in re.findall(r"\b(?:kafkastore|pipelines)(?:\.\w+)+", doc.split(";")[0]):
        if name == _module_name(path) or name in homes:
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            homes.append(name)
    return homes


def _defined_public(module) -> list[str]:
    """The public names a module defines: its ``__all__``, else the functions, classes and
    assignments at its top level whose names do not start with ``_`` (not what it imports)."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    names = []
    for node in ast.parse(pathlib.Path(module.__file__).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def test_every_alias_names_its_home():
    for path in _alias_modules():
        assert _homes(path), f"{path.relative_to(ROOT)}: its docstring names no module it moved to"


@pytest.mark.parametrize("path", _alias_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_alias_module_re_exports_every_public_name_of_its_home(path: pathlib.Path):
    """An import from the old path never breaks silently: whatever the home defines (and a
    user could have imported from the old module) is reachable at the old path too."""
    import importlib
    alias = importlib.import_module(_module_name(path))
    missing = {home: [n for n in _defined_public(importlib.import_module(home))
                      if not hasattr(alias, n)]
               for home in _homes(path)}
    missing = {home: names for home, names in missing.items() if names}
    assert not missing, f"{_module_name(path)} does not re-export: {missing}"


def test_renamed_classes_keep_their_old_names_for_one_release():
    """A renamed class stays importable under its old name, as the same class, at the old
    paths users wrote (the old module, now an alias, included)."""
    import importlib

    from kafkastore.protocol import membership, registry

    brokers = importlib.import_module("kafkastore.protocol.brokers")   # the old path itself
    assert membership.BrokerRegistry is membership.BrokerMembership
    assert brokers.BrokerRegistry is brokers.BrokerMembership is membership.BrokerMembership
    assert registry.Registry is registry.HandlerTable
