"""Moved to kafkastore.read.reader; this old import path stays for one release."""
from .read.reader import *  # noqa: F401,F403
