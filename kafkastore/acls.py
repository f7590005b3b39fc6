"""Moved to kafkastore.cluster.acls; this old import path stays for one release."""
from .cluster.acls import *  # noqa: F401,F403
