"""Moved to kafkastore.protocol.membership; this old import path stays for one release."""
from .membership import *  # noqa: F401,F403
