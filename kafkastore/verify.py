"""Moved to kafkastore.read.verify; this old import path stays for one release."""
from .read.verify import *  # noqa: F401,F403
