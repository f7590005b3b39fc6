"""Moved to kafkastore.write.jsonl_bulk; this old import path stays for one release."""
from .write.jsonl_bulk import *  # noqa: F401,F403
from .write.jsonl_bulk import _native_table  # noqa: F401 (imported from the old path)
