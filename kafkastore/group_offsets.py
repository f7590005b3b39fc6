"""Moved to kafkastore.groups.offsets; this old import path stays for one release."""
from .groups.offsets import *  # noqa: F401,F403
