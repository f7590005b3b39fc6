"""Moved to kafkastore.protocol.apis.legacy; this old import path stays for one release."""
from .apis.legacy import *  # noqa: F401,F403
