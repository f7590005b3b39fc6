"""Moved to kafkastore.write.kafka_import (import_kafka_dir) and kafkastore.read.verify
(verify_partition); this old import path stays for one release."""
from .write.kafka_import import *  # noqa: F401,F403
from .read.verify import *  # noqa: F401,F403
