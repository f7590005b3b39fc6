"""``python -m pipelines.quality --table T [--snapshot ID]``: see
:func:`pipelines.quality.validation.main`."""
from __future__ import annotations

import sys

from .validation import main

if __name__ == "__main__":
    sys.exit(main())
