"""Moved to kafkastore.maintenance.gc; this old import path stays for one release."""
from .maintenance.gc import *  # noqa: F401,F403
