"""Moved to kafkastore.protocol.wire.codec; this old import path stays for one release."""
from .wire.codec import *  # noqa: F401,F403
from .wire.codec import _fields, _writer  # noqa: F401 (imported from the old path)
