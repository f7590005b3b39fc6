"""Moved to kafkastore.maintenance.retention; this old import path stays for one release."""
from .maintenance.retention import *  # noqa: F401,F403
