"""Moved to kafkastore.maintenance.compaction (planning, the scan, the survivors, the results)
and kafkastore.maintenance.compaction_rewrite (rewriting, the swap commit, the one-process
driver); this old import path stays for one release."""
from .maintenance.compaction import *  # noqa: F401,F403
from .maintenance.compaction_rewrite import *  # noqa: F401,F403
