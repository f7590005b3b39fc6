"""Moved to kafkastore.protocol.apis.admin; this old import path stays for one release."""
from .apis.admin import *  # noqa: F401,F403
