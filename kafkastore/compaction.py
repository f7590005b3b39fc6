"""Moved to kafkastore.maintenance.compaction; this old import path stays for one release."""
from .maintenance.compaction import *  # noqa: F401,F403
