"""Moved to kafkastore.protocol.apis.acls; this old import path stays for one release."""
from .apis.acls import *  # noqa: F401,F403
