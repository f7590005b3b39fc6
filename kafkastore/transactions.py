"""Moved to kafkastore.write.transactions (open transactions seen from the log: find a
hanging one and abort it offline); this old import path stays as an alias for one release
and holds no code."""
from __future__ import annotations

from .write.transactions import *  # noqa: F401,F403
from .write.transactions import OpenTransaction, abort_transaction, open_transactions  # noqa: F401
