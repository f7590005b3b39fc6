"""Moved to kafkastore.write.kafka_import; this old import path stays for one release."""
from .write.kafka_import import *  # noqa: F401,F403
