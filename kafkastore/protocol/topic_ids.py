"""Moved to kafkastore.protocol.caches.topic_ids; this old import path stays for one release."""
from .caches.topic_ids import *  # noqa: F401,F403
