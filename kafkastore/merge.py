"""Moved to kafkastore.maintenance.merge; this old import path stays for one release."""
from .maintenance.merge import *  # noqa: F401,F403
