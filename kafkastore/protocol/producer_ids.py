"""Moved to kafkastore.protocol.coordinators.producer_ids; this old import path stays
for one release."""
from .coordinators.producer_ids import *  # noqa: F401,F403
