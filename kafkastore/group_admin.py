"""Moved to kafkastore.groups.admin; this old import path stays for one release."""
from .groups.admin import *  # noqa: F401,F403
