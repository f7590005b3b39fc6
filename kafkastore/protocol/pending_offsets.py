"""Moved to kafkastore.protocol.coordinators.pending_offsets; this old import path stays
for one release."""
from .coordinators.pending_offsets import *  # noqa: F401,F403
