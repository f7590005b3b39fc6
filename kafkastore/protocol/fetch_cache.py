"""Moved to kafkastore.protocol.caches.fetch_cache; this old import path stays for one release."""
from .caches.fetch_cache import *  # noqa: F401,F403
