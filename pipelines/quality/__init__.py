"""The quality gate: validate a load's snapshot, move the ``validated`` tag.

The verdict, the checking of one snapshot, the reports and the entry points are in
:mod:`pipelines.quality.validation`; what a snapshot brought is
:mod:`pipelines.quality.rows`, the Great Expectations checks :mod:`pipelines.quality.checks`
and the move of the tag :mod:`pipelines.quality.gate`. Their public names are re-exported
here, so ``from pipelines.quality import validate_for_airflow`` (the DAG file's import)
keeps working; ``python -m pipelines.quality`` runs :func:`main` (``__main__.py``).
"""
from __future__ import annotations

from .checks import expectation_checks, import_gx, run_gx  # noqa: F401 (re-exported)
from .gate import PUBLISH_ATTEMPTS, publish  # noqa: F401 (re-exported)
from .rows import (Range, check_frames, is_kafkastore, read_rows,  # noqa: F401 (re-exported)
                   snapshot_ranges)
from .validation import (DEFAULT_MAX_DEAD_LETTER_FRACTION, KAFKASTORE_OPERATIONS,  # noqa: F401
                         QUALITY_DIR, QUALITY_SETTINGS, QualityCheckFailed, QualityResult,
                         check_snapshot, log, main, quality_url, validate_for_airflow,
                         validate_snapshot)
