"""Moved to kafkastore.protocol.wire.api_keys; this old import path stays for one release."""
from .wire.api_keys import *  # noqa: F401,F403
