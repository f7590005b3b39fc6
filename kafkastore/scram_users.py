"""Moved to kafkastore.cluster.scram; this old import path stays for one release."""
from .cluster.scram import *  # noqa: F401,F403
