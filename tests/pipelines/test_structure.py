"""How pipelines/ is cut, read from the source: no module uses another's
private names, pyiceberg's private API is used in one adapter module only, and the
table layout's defaults are defined once."""
import ast
import pathlib

PIPELINES = pathlib.Path(__file__).resolve().parents[2] / "pipelines"
ADAPTER = "iceberg_internals.py"


def _modules():
    for path in sorted(PIPELINES.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_reaches_into_another_modules_privates():
    """``from .x import _y`` and ``x._y`` (x a module imported as such) are private reaches."""
    offending = []
    for path, tree in _modules():
        if (ast.get_docstring(tree) or "").startswith("Moved to"):
            continue  # an old path's alias re-exports what its importers took, privates too
        modules = set()   # names bound to modules: `from . import x as y`, `import pipelines.x as y`
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if node.module is None or node.module.startswith("pipelines") and node.level == 0:
                        modules.add(a.asname or a.name)
                    if _private(a.name) and (node.level or (node.module or "").startswith(
                            ("pipelines", "pyiceberg"))) and path.name != ADAPTER:
                        offending.append(f"{path.name}: from {node.module} import {a.name}")
            elif isinstance(node, ast.Import):
                modules |= {a.asname or a.name.split(".")[0] for a in node.names}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr)
                    and isinstance(node.value, ast.Name) and node.value.id in modules
                    and path.name != ADAPTER):
                offending.append(f"{path.name}: {node.value.id}.{node.attr}")
    assert offending == []


def test_pyiceberg_private_api_lives_in_the_adapter_only():
    """Every ``pyiceberg`` private name and every private method call on a pyiceberg
    object is in pipelines/iceberg_internals.py, each wrapped with why."""
    users = sorted({path.name for path, tree in _modules()
                    for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyiceberg")
                    and any(_private(a.name) for a in node.names)}
                   | {path.name for path, tree in _modules()
                      for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute)
                      and node.attr in {"_convert_schema_if_needed", "_resolve_table_location"}})
    assert users == [ADAPTER]


def test_table_layout_defaults_are_defined_once():
    """The default partition spec and the dead-letter suffix are one constant each."""
    for literal in ('"day(timestamp)"', '"_dead_letters"'):
        defining = sorted(
            path.name for path, tree in _modules() for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and f'"{node.value}"' == literal
            and not _in_message(tree, node))
        assert defining == ["table_layout.py"], literal


def _in_message(tree, constant) -> bool:
    """A literal inside an f-string or a docstring is prose, not a definition."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and constant in node.values:
            return True
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)) and node.body \
                and isinstance(node.body[0], ast.Expr) and node.body[0].value is constant:
            return True
    return False
