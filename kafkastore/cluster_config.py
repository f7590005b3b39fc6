"""Moved to kafkastore.cluster.documents; this old import path stays for one release."""
from .cluster.documents import *  # noqa: F401,F403
