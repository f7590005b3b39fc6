"""Delta manifest versions moved to :mod:`kafkastore.manifest.delta`; this module is its
old import path, kept as an alias for one release. It holds no code."""
from __future__ import annotations

from .manifest.delta import (FORMAT, KIND_DELTA, KIND_FULL, _STRUCTURED,  # noqa: F401
                             _scalar_fields, _segment_changes, apply_delta, changes,
                             delta_dict, encode, summary)
