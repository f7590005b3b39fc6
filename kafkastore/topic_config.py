"""Moved to kafkastore.topics.topic_config; this old import path stays for one release."""
from .topics.topic_config import *  # noqa: F401,F403
