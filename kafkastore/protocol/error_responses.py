"""Moved to kafkastore.protocol.wire.error_responses; this old import path stays for one release."""
from .wire.error_responses import *  # noqa: F401,F403
