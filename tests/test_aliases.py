"""Old import paths are one table, served by one import hook, and hold no code.

When a module moves (the redesign put the flat folders into packages), its old path stays
for one release so that users' imports keep working. The old paths are declared in
``kafkastore/old_paths.py`` and ``pipelines/old_paths.py`` (old path -> homes, and the
re-namings such as ``Broker`` -> ``LogWriter``); the finder there builds the module on
import, warning with a ``DeprecationWarning`` that names the home. No file sits at an old
path, so no code can grow back there, where nobody looks for it. A package whose old module
became the package (``kafkastore.cli``, ``kafkastore.topics``, ``pipelines.decoding``)
keeps the old names in its ``__init__``, which may hold only imports.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib
import re
import sys
import warnings

import pytest

from kafkastore.old_paths import FINDER, Moved, public_names
from tests.helpers.aliases import OLD_PATHS, ROOT, alias_modules, module_name

OLD = sorted(OLD_PATHS)


def _fresh_import(name: str, monkeypatch):
    """Import an old path anew (its warning is given once per import), restoring the
    module that was there afterwards."""
    monkeypatch.delitem(sys.modules, name, raising=False)
    parent, _, child = name.rpartition(".")
    if hasattr(sys.modules[parent], child):
        monkeypatch.delattr(sys.modules[parent], child)
    __import__(name)   # a builtin: the warning's frame is this function's
    return sys.modules[name]


def _quiet_import(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module(name)


def test_the_public_names_of_a_home_are_what_it_defines(tmp_path, monkeypatch):
    """The rule the re-export test below and the hook share (one home: old_paths.py): a
    home's ``__all__`` if it has one, else what its top level defines and does not mark
    private; never what it imports."""
    (tmp_path / "planted_home.py").write_text(
        "import os\nfrom json import dumps\nfrom typing import Any\n"
        "def f(): pass\nasync def g(): pass\nclass C: pass\nX = 1\nY: int = 2\nA = B = 3\n"
        "def _private(): pass\n_Z = 3\nif True:\n    NESTED = 4\n")
    (tmp_path / "planted_listed_home.py").write_text("__all__ = ['f']\ndef f(): pass\ndef g(): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert public_names(importlib.import_module("planted_home")) == ["f", "g", "C", "X", "Y", "A", "B"]
    assert public_names(importlib.import_module("planted_listed_home")) == ["f"]


def test_the_known_old_paths_are_in_the_table():
    # the manifest's old delta module, and the protocol's flat paths moved into wire/,
    # apis/, coordinators/, caches/, and the jobs' flat paths
    assert OLD_PATHS["kafkastore.manifest_delta"].homes == ("kafkastore.manifest.delta",)
    assert "kafkastore.protocol.api_txn" in OLD_PATHS
    assert "pipelines.iceberg" in OLD_PATHS
    assert set(OLD_PATHS) <= set(FINDER.table)   # both tables are installed


@pytest.mark.parametrize("old", OLD)
def test_no_file_sits_at_an_old_path(old: str):
    """An old path cannot hold code: there is no module or package there to grow (the
    finder comes last on sys.meta_path, so a file would silently win over the table)."""
    base = ROOT.joinpath(*old.split("."))
    assert not base.with_suffix(".py").exists() and not (base / "__init__.py").exists()
    spec = importlib.util.find_spec(old)
    assert spec.loader is FINDER and spec.origin == "old import path"


@pytest.mark.parametrize("old", OLD)
def test_every_table_entry_points_at_existing_homes(old: str):
    moved = OLD_PATHS[old]
    assert moved.homes, f"{old} names no home"
    for home in moved.homes:
        spec = importlib.util.find_spec(home)
        assert spec is not None and spec.loader is not FINDER, f"{old}: home {home} is missing"
        assert spec.origin and pathlib.Path(spec.origin).is_file()
    for renamed, dotted in moved.renamed.items():
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), f"{old}.{renamed}: no {dotted}"


@pytest.mark.parametrize("old", OLD)
def test_an_old_path_imports_and_warns_naming_its_home(old: str, monkeypatch):
    with pytest.warns(DeprecationWarning) as caught:
        module = _fresh_import(old, monkeypatch)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    said = [m for m in messages if m.startswith(f"{old} moved to ")]
    assert said, messages
    for home in OLD_PATHS[old].homes:
        assert home in said[0]
    # the warning points at the importing line, not at the import machinery
    assert all(w.filename == __file__ for w in caught if str(w.message) in said)
    assert module.__name__ == old and module.__doc__.startswith("Moved to")


@pytest.mark.parametrize("old", OLD)
def test_an_old_path_re_exports_every_public_name_of_its_homes(old: str):
    """An import from the old path never breaks silently: whatever a home defines (and a
    user could have imported from the old module) is reachable at the old path, as the same
    object; ``__all__`` lists it; a renamed name is the object it was renamed to."""
    module = _quiet_import(old)
    moved = OLD_PATHS[old]
    homes = [importlib.import_module(h) for h in moved.homes]
    missing, different = {}, []
    for home in homes:
        names = [n for n in public_names(home) if n not in moved.renamed]
        missing[home.__name__] = [n for n in names if not hasattr(module, n)]
        assert not set(names) - set(module.__all__), f"{old}.__all__ lacks names of {home.__name__}"
        for n in names:
            first = next(h for h in homes if hasattr(h, n))   # the first home listed wins
            if hasattr(module, n) and getattr(module, n) is not getattr(first, n):
                different.append(f"{home.__name__}.{n}")
    missing = {home: names for home, names in missing.items() if names}
    assert not missing, f"{old} does not re-export: {missing}"
    assert not different, f"{old} re-exports other objects than its homes: {different}"
    for renamed, dotted in moved.renamed.items():
        target, _, name = dotted.rpartition(".")
        assert getattr(module, renamed) is getattr(importlib.import_module(target), name)


def test_an_old_path_reaches_a_home_s_private_names_and_nothing_else():
    """The old alias modules re-exported a few ``_`` names that tests imported; the hook
    serves any name of a home on access, and no name the homes lack."""
    jsonl_bulk = _quiet_import("kafkastore.jsonl_bulk")
    home = importlib.import_module("kafkastore.write.jsonl_bulk")
    assert jsonl_bulk._native_table is home._native_table
    iceberg = _quiet_import("pipelines.iceberg")
    catalog = importlib.import_module("pipelines.warehouse.catalog")
    assert iceberg._name is catalog.name_of
    with pytest.raises(AttributeError):
        jsonl_bulk.no_such_name_anywhere


def test_the_finder_serves_only_the_table():
    assert FINDER.find_spec("kafkastore.no_such_module") is None
    assert FINDER.find_spec("kafkastore.write.log_writer") is None   # a real module
    assert sys.meta_path[-1] is FINDER or FINDER in sys.meta_path


def test_moved_declares_homes_in_order_and_renamings():
    moved = Moved("a.b", "a.c", renamed={"Old": "a.b.New"})
    assert moved.homes == ("a.b", "a.c") and moved.renamed == {"Old": "a.b.New"}


def test_no_old_path_is_run_with_python_dash_m():
    """The hook's modules have no code for ``python -m`` (runpy): no doc, script, DAG or CI
    file runs an old path that way (``python -m kafkastore.cli`` and ``python -m
    pipelines.quality`` are packages with a ``__main__``)."""
    runs = set()
    for top in ("README.md", "docs", "dags", "run", "scripts", ".ci", "bench", "Makefile"):
        for path in ([ROOT / top] if (ROOT / top).is_file() else (ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in {"", ".md", ".py", ".sh", ".yml", ".yaml", ".txt"}:
                runs.update(re.findall(r"-m\s+((?:kafkastore|pipelines)(?:\.\w+)+)",
                                       path.read_text(errors="replace")))
    assert runs and not runs & set(OLD_PATHS)


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
    return False


def test_only_package_inits_are_marked_as_aliases():
    """An alias FILE is only a package's ``__init__`` (the old module became the package);
    every other old path is in the table."""
    found = alias_modules()
    assert ROOT / "kafkastore" / "cli" / "__init__.py" in found
    assert [p for p in found if p.name != "__init__.py"] == []


@pytest.mark.parametrize("path", alias_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_an_alias_package_init_holds_only_imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    extra = [f"line {n.lineno}: {ast.unparse(n).splitlines()[0]}"
             for n in tree.body if not _allowed(n)]
    assert not extra, f"{path.relative_to(ROOT)} is an alias package init but holds code: {extra}"
    assert any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)
    importlib.import_module(module_name(path))


def test_renamed_classes_keep_their_old_names_for_one_release():
    """A renamed class stays importable under its old name, as the same class, at the old
    paths users wrote (the old module, now an entry of the table, included)."""
    from kafkastore.protocol.handler_table import HandlerTable
    from kafkastore.protocol.membership import BrokerMembership
    from kafkastore.write.log_writer import LogWriter

    brokers = _quiet_import("kafkastore.protocol.brokers")   # the old paths themselves
    assert brokers.BrokerRegistry is brokers.BrokerMembership is BrokerMembership
    registry = _quiet_import("kafkastore.protocol.registry")
    assert registry.Registry is registry.HandlerTable is HandlerTable
    assert "Registry" in registry.__all__ and "BrokerRegistry" in brokers.__all__
    assert _quiet_import("kafkastore.broker").Broker is LogWriter


def test_a_renamed_name_lives_only_in_the_table():
    """A re-naming is a row of the table, not an assignment in a live module: the homes
    know only the new names (so the code cannot go on using the old ones)."""
    for old, moved in OLD_PATHS.items():
        for home in moved.homes:
            module = importlib.import_module(home)
            kept = [name for name, dotted in moved.renamed.items()
                    if name != dotted.rpartition(".")[2] and hasattr(module, name)]
            assert not kept, f"{home} still binds the old name(s) {kept} of {old}"
