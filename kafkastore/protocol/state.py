"""Moved to kafkastore.protocol.caches.metadata_cache; this old import path stays
for one release."""
from .caches.metadata_cache import *  # noqa: F401,F403
