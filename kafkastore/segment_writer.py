"""Moved to kafkastore.write.segments; this old import path stays for one release."""
from .write.segments import *  # noqa: F401,F403
