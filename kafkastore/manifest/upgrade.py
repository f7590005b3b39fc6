"""The manifest's format upgrades that reach outside a partition: the format 1 -> 2 step.

Format-2 manifest versions may be deltas (:mod:`kafkastore.manifest.delta`). kafkastore
before them reads only format 1, and its gc would expire the versions a delta needs without
reading them. So before a topic's first format-2 version is written, its ``_topic.json`` is
moved past format 2, which older kafkastore refuses (:func:`fence_old_readers`, called by
the commit target once per store).

The move writes ``_topic.json`` at format 3 (versioned topic metadata, kept by
:mod:`kafkastore.topics`), the same bytes a racing first change of the topic writes
(:func:`write_versioned`, which the topics' first change uses too), so the two cannot undo
each other. This module sits below the topics: it reads and writes the one file through
:mod:`kafkastore.layout` and imports nothing above the manifest.
"""
from __future__ import annotations

import json
from typing import Any

from .. import layout
from ..errors import CorruptMetadataError, ObjectNotFoundError
from ..storage import Storage

#: ``_topic.json`` of a topic changed since its creation: the metadata lives in versions.
VERSIONED_TOPIC_FORMAT = 3


def fence_old_readers(storage: Storage, name: str) -> bool:
    """Move a format-1 ``_topic.json`` to format 3 (nothing else changes); whether it did.

    Called before a topic's first format-2 manifest version is written: kafkastore older
    than delta versions refuses a format-2 topic file, so it stops touching the topic
    before the new format appears (its gc expires versions without reading them, which
    would cut a delta from its base).

    The file moves straight to format 3 (versioned metadata), not 2: that is an overwrite
    of the same bytes a racing first change of the topic writes, so the two cannot undo
    each other (a format-2 overwrite could undo the move to 3 and hide the committed
    change).
    """
    path = layout.topic_meta_path(name)
    try:
        doc = json.loads(storage.get(path))
    except ObjectNotFoundError:
        return False  # no topic file (a deleted topic, a bare partition): nothing to fence
    except (ValueError, UnicodeDecodeError):
        raise CorruptMetadataError(f"topic {name!r}: {path} is not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != 1:
        return False
    write_versioned(storage, name, doc, _created_ms(name, doc))
    return True


def write_versioned(storage: Storage, name: str, doc: dict, created_ms: int) -> dict:
    """Overwrite ``_topic.json`` holding ``doc`` (format 1 or 2) with its format-3 form;
    returns what it wrote.

    The bytes depend only on ``doc``, so racing first changes write the same object; the
    incarnation comes from ``created_ms``, which no change alters.
    """
    new = dict(doc, format=VERSIONED_TOPIC_FORMAT, incarnation=f"c{created_ms}")
    storage.put(layout.topic_meta_path(name), json.dumps(new, indent=1, sort_keys=True).encode())
    return new


def _created_ms(name: str, doc: dict[str, Any]) -> int:
    """The creation time the incarnation is named after; refuses a file of another topic."""
    path = layout.topic_meta_path(name)
    if doc.get("topic") != name:
        raise CorruptMetadataError(f"{path} describes topic {doc.get('topic')!r}")
    try:
        return int(doc.get("created_ms", 0))
    except (TypeError, ValueError) as exc:
        raise CorruptMetadataError(f"bad topic metadata: {exc}") from None
