"""Moved to kafkastore.protocol.apis.sasl; this old import path stays for one release."""
from .apis.sasl import *  # noqa: F401,F403
