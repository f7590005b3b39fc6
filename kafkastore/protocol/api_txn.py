"""Moved to kafkastore.protocol.apis.txn (the handlers) and
kafkastore.protocol.coordinators.txn_service (the store and the service); this old import
path stays for one release."""
from .apis.txn import *  # noqa: F401,F403
from .coordinators.txn_service import *  # noqa: F401,F403
