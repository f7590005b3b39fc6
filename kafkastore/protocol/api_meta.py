"""Moved to kafkastore.protocol.apis.meta; this old import path stays for one release."""
from .apis.meta import *  # noqa: F401,F403
