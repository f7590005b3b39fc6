"""Moved to kafkastore.protocol.wire.frame_check; this old import path stays for one release."""
from .wire.frame_check import *  # noqa: F401,F403
