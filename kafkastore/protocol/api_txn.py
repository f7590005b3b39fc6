"""Moved to kafkastore.protocol.apis.txn; this old import path stays for one release."""
from .apis.txn import *  # noqa: F401,F403
