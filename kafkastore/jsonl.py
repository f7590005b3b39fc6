"""Moved to kafkastore.write.jsonl; this old import path stays for one release."""
from .write.jsonl import *  # noqa: F401,F403
