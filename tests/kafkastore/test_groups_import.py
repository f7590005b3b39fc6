"""Importing the groups' modules does not load pyarrow: the offline group commands that only
list or describe groups, and the group coordinator's records, never pay its import (the
reader is imported when a partition is first read)."""
from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["kafkastore.groups.admin", "kafkastore.groups.offsets",
                                    "kafkastore.groups.records"])
def test_importing_a_groups_module_does_not_load_pyarrow(module):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('pyarrow'))[:3])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
