"""Moved to kafkastore.protocol.coordinators.group; this old import path stays for one release."""
from .coordinators.group import *  # noqa: F401,F403
