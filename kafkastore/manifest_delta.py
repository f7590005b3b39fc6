"""Moved to kafkastore.manifest.delta (delta manifest versions); this old import path
stays as an alias for one release and holds no code."""
from __future__ import annotations

from .manifest.delta import (FORMAT, KIND_DELTA, KIND_FULL, SCALAR_FIELDS,  # noqa: F401
                             _segment_changes, apply_delta, changes,
                             delta_dict, encode, summary)
