"""Moved to kafkastore.protocol.caches.data_watch; this old import path stays for one release."""
from .caches.data_watch import *  # noqa: F401,F403
