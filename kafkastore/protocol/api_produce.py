"""Moved to kafkastore.protocol.apis.produce; this old import path stays for one release."""
from .apis.produce import *  # noqa: F401,F403
