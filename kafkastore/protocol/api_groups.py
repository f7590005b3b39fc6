"""Moved to kafkastore.protocol.apis.groups; this old import path stays for one release."""
from .apis.groups import *  # noqa: F401,F403
