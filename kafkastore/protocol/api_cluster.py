"""Moved to kafkastore.protocol.apis.cluster; this old import path stays for one release."""
from .apis.cluster import *  # noqa: F401,F403
