"""Moved to kafkastore.protocol.apis.fetch; this old import path stays for one release."""
from .apis.fetch import *  # noqa: F401,F403
