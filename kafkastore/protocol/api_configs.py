"""Moved to kafkastore.protocol.apis.configs; this old import path stays for one release."""
from .apis.configs import *  # noqa: F401,F403
