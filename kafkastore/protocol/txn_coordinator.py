"""Moved to kafkastore.protocol.coordinators.txn; this old import path stays for one release."""
from .coordinators.txn import *  # noqa: F401,F403
