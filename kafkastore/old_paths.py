"""The old import paths of moved modules: one table, served by one import hook.

When a module moves into a package, its old path (``kafkastore.broker``,
``kafkastore.protocol.api_txn``...) keeps working for one release without a file at that
path: :data:`OLD_PATHS` maps it to its home(s), and the :class:`OldPathFinder` on
``sys.meta_path`` (installed by ``kafkastore/__init__.py``; ``pipelines/__init__.py`` adds
:data:`pipelines.old_paths.OLD_PATHS`) builds the module on import from its homes: every
name a ``from home import *`` gives (the first home listed wins a clash), the table's
re-namings (``Broker`` is ``LogWriter``), ``__all__``, and any other name of a home on
attribute access. Importing an old path warns with a ``DeprecationWarning`` naming the
home. The finder comes last on ``sys.meta_path``: a real module always wins, and a test
fails while a file sits at an old path (an old path holds no code).
"""
from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import pathlib
import sys
import types
import warnings
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Moved:
    """Where an old module path's names live now.

    ``homes``: the modules it re-exports, in order (the first wins a name two define);
    ``renamed``: old name -> ``"module.name"`` for a name not found under itself in a home
    (a renamed class, a name re-exported from a module that is not a home)."""

    homes: tuple[str, ...]
    renamed: dict[str, str] = field(default_factory=dict)

    def __init__(self, *homes: str, renamed: dict[str, str] | None = None):
        object.__setattr__(self, "homes", homes)
        object.__setattr__(self, "renamed", dict(renamed or {}))


_W = "kafkastore.write"
_M = "kafkastore.maintenance"
_P = "kafkastore.protocol"
_SEGMENT_ERRORS = ("CorruptIndexError", "CorruptRecordError", "CrcMismatchError",
                   "OffsetOrderError", "SegmentOffsetOverflowError", "TruncatedBatchError",
                   "UnsupportedFormatError")

#: kafkastore's old module paths -> their homes.
OLD_PATHS: dict[str, Moved] = {
    "kafkastore.acls": Moved("kafkastore.cluster.acls"),
    "kafkastore.admin": Moved(f"{_W}.kafka_import", "kafkastore.read.verify"),
    "kafkastore.broker": Moved(f"{_W}.log_writer", f"{_W}.batching", f"{_W}.arrow_ingest",
                               renamed={"Broker": f"{_W}.log_writer.LogWriter"}),
    "kafkastore.cluster_config": Moved("kafkastore.cluster.documents"),
    "kafkastore.compaction": Moved(f"{_M}.compaction_rewrite", f"{_M}.compaction"),
    "kafkastore.config": Moved("kafkastore.cli.log_config"),
    "kafkastore.format.segment": Moved(
        "kafkastore.format.segment_scan", "kafkastore.format.segment_stats",
        "kafkastore.format.segment_build", "kafkastore.format.segment_indexes",
        renamed={name: f"kafkastore.errors.{name}" for name in _SEGMENT_ERRORS}),
    "kafkastore.gc": Moved(f"{_M}.gc"),
    "kafkastore.group_admin": Moved("kafkastore.groups.admin"),
    "kafkastore.group_offsets": Moved("kafkastore.groups.offsets"),
    "kafkastore.jsonl": Moved(f"{_W}.jsonl"),
    "kafkastore.jsonl_bulk": Moved(f"{_W}.jsonl_bulk"),
    "kafkastore.kafka_import": Moved(f"{_W}.kafka_import"),
    "kafkastore.manifest_delta": Moved("kafkastore.manifest.delta"),
    "kafkastore.merge": Moved(f"{_M}.merge", f"{_M}.housekeeper"),
    "kafkastore.reader": Moved("kafkastore.read.reader"),
    "kafkastore.retention": Moved(f"{_M}.retention"),
    "kafkastore.scram_users": Moved("kafkastore.cluster.scram"),
    "kafkastore.segment_writer": Moved(f"{_W}.segments"),
    "kafkastore.topic_config": Moved("kafkastore.topics.topic_config"),
    "kafkastore.transactions": Moved(f"{_W}.transactions"),
    "kafkastore.verify": Moved("kafkastore.read.verify"),
    # the protocol's flat paths, moved into wire/, apis/, coordinators/, caches/
    f"{_P}.api_acls": Moved(f"{_P}.apis.acls"),
    f"{_P}.api_admin": Moved(f"{_P}.apis.admin"),
    f"{_P}.api_cluster": Moved(f"{_P}.apis.cluster"),
    f"{_P}.api_configs": Moved(f"{_P}.apis.configs"),
    f"{_P}.api_fetch": Moved(f"{_P}.apis.fetch"),
    f"{_P}.api_groups": Moved(f"{_P}.apis.groups"),
    f"{_P}.api_keys": Moved(f"{_P}.wire.api_keys"),
    f"{_P}.api_legacy": Moved(f"{_P}.apis.legacy"),
    f"{_P}.api_meta": Moved(f"{_P}.apis.meta"),
    f"{_P}.api_produce": Moved(f"{_P}.apis.produce"),
    f"{_P}.api_quotas": Moved(f"{_P}.apis.client_quotas"),
    f"{_P}.api_txn": Moved(f"{_P}.coordinators.txn_service", f"{_P}.coordinators.txn_store",
                           f"{_P}.apis.txn"),
    f"{_P}.api_users": Moved(f"{_P}.apis.users"),
    f"{_P}.brokers": Moved(f"{_P}.membership",
                           renamed={"BrokerRegistry": f"{_P}.membership.BrokerMembership"}),
    f"{_P}.codec": Moved(f"{_P}.wire.codec"),
    f"{_P}.data_watch": Moved(f"{_P}.caches.data_watch"),
    f"{_P}.error_codes": Moved(f"{_P}.wire.error_codes"),
    f"{_P}.error_responses": Moved(f"{_P}.wire.error_responses"),
    f"{_P}.fetch_cache": Moved(f"{_P}.caches.fetch_cache"),
    f"{_P}.frame_check": Moved(f"{_P}.wire.frame_check"),
    f"{_P}.group_coordinator": Moved(f"{_P}.coordinators.group"),
    f"{_P}.legacy_messages": Moved(f"{_P}.wire.legacy_messages"),
    f"{_P}.pending_offsets": Moved(f"{_P}.coordinators.pending_offsets"),
    f"{_P}.producer_ids": Moved(f"{_P}.coordinators.producer_ids"),
    f"{_P}.registry": Moved(f"{_P}.handler_table",
                            renamed={"Registry": f"{_P}.handler_table.HandlerTable"}),
    f"{_P}.sasl": Moved(f"{_P}.apis.sasl"),
    f"{_P}.state": Moved(f"{_P}.caches.metadata_cache"),
    f"{_P}.topic_ids": Moved(f"{_P}.caches.topic_ids"),
    f"{_P}.txn_coordinator": Moved(f"{_P}.coordinators.txn"),
}


def home_names(moved: Moved) -> str:
    """The homes of an old path as the warning and the module's docstring say them."""
    return " and ".join(moved.homes)


def _star_names(module: types.ModuleType) -> list[str]:
    """What ``from module import *`` binds: its ``__all__``, else its names without ``_``."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return list(names)


def public_names(home: types.ModuleType) -> list[str]:
    """The public names of a home, which its old path lists in ``__all__`` and must re-export:
    the home's own ``__all__``, else the names its top level defines (functions, classes,
    assignments) that do not start with ``_``, not the names it imports."""
    if hasattr(home, "__all__"):
        return list(home.__all__)
    names: list[str] = []
    for node in ast.parse(pathlib.Path(home.__file__).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def _resolve(dotted: str):
    """``"a.b.name"`` -> the object ``name`` of module ``a.b``."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


class OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of the table and builds its module from the homes."""

    def __init__(self):
        self.table: dict[str, Moved] = {}

    def find_spec(self, fullname, path=None, target=None):
        """A spec for an old path of the table; None for any other name."""
        if fullname not in self.table:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin="old import path")

    def create_module(self, spec):
        """The default module object."""
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        """Fill the old path's module from its homes and warn that it moved."""
        moved = self.table[module.__name__]
        fill_module(module, moved)
        warnings.warn(f"{module.__name__} moved to {home_names(moved)}; import it from there "
                      f"(this old path goes in the next release)", DeprecationWarning,
                      stacklevel=2)  # warnings skips the import machinery's frames: the importer


def fill_module(module: types.ModuleType, moved: Moved) -> None:
    """Bind in ``module`` what the old alias module bound: the homes' star names (the first
    home wins), the re-namings, ``__all__``, and every other name of a home on access."""
    homes = [importlib.import_module(home) for home in moved.homes]
    exported: list[str] = []
    for home in reversed(homes):
        for name in _star_names(home):
            setattr(module, name, getattr(home, name))
    for home in homes:
        exported += [n for n in public_names(home) if n not in exported]
    for old, dotted in moved.renamed.items():
        setattr(module, old, _resolve(dotted))
        if not old.startswith("_") and old not in exported:
            exported.append(old)
    module.__all__ = exported
    module.__doc__ = f"Moved to {home_names(moved)}; this old import path stays for one release."

    def __getattr__(name: str):
        for home in homes:
            if hasattr(home, name):
                return getattr(home, name)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__


#: The one finder; :func:`install` adds a package's table to it.
FINDER = OldPathFinder()


def install(table: dict[str, Moved]) -> None:
    """Serve the old paths of ``table`` (idempotent): the finder goes last on sys.meta_path."""
    FINDER.table.update(table)
    if FINDER not in sys.meta_path:
        sys.meta_path.append(FINDER)
