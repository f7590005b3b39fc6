"""Moved to kafkastore.protocol.apis.users; this old import path stays for one release."""
from .apis.users import *  # noqa: F401,F403
