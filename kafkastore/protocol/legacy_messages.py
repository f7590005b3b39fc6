"""Moved to kafkastore.protocol.wire.legacy_messages; this old import path stays for one release."""
from .wire.legacy_messages import *  # noqa: F401,F403
