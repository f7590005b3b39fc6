"""Moved to kafkastore.protocol.apis.client_quotas; this old import path stays for one release."""
from .apis.client_quotas import *  # noqa: F401,F403
