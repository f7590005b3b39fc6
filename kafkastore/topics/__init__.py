"""Moved to kafkastore.topics.admin (topics: create, list, describe, alter, delete, and their
``_topic.json``); this package's old import path ``kafkastore.topics`` keeps its API for one
release. Topic configs are in kafkastore.topics.topic_config.
"""
from .admin import *  # noqa: F401,F403
from .admin import _tombstone, _tombstone_mark  # noqa: F401 (imported from the old path)
