"""Moved to kafkastore.protocol.wire.error_codes; this old import path stays for one release."""
from .wire.error_codes import *  # noqa: F401,F403
