"""Moved to kafkastore.cli.log_config; this old import path stays for one release."""
from .cli.log_config import *  # noqa: F401,F403
