"""The one switch between kafkastore's optional C extensions and their pure-Python twins.

Two extensions are built when a compiler is there (``setup.py``):
``kafkastore.format._native`` (the byte-format kernel: record batches to and from Arrow
columns, CRC-32C, murmur2) and ``kafkastore._jsonl_native`` (``produce`` input). Every
module that has a fast path asks here, so ``KAFKASTORE_NO_EXTENSIONS=1`` in the environment
(read once, at import) turns them all off together; the pure implementations then run, with
the same results (the tests run both).
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

#: False when ``KAFKASTORE_NO_EXTENSIONS=1``: every fast path is off.
ENABLED = os.environ.get("KAFKASTORE_NO_EXTENSIONS") != "1"


def load(name: str) -> ModuleType | None:
    """The extension module ``name`` if it is built, else None, whatever :data:`ENABLED`
    says (tests compare both implementations in one process)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def use(name: str) -> ModuleType | None:
    """The extension module ``name`` to run: None when not built or switched off."""
    return load(name) if ENABLED else None
