"""Moved to kafkastore.write.log_writer (the writer, ``Broker`` renamed ``LogWriter``),
kafkastore.write.batching (sealed batches and segments) and kafkastore.write.arrow_ingest
(``send_arrow``, ``send_many``); this old import path stays as an alias for one release
and holds no code: ``Broker`` is ``LogWriter``."""
from __future__ import annotations

from .write.arrow_ingest import *  # noqa: F401,F403
from .write.batching import *  # noqa: F401,F403
from .write.log_writer import *  # noqa: F401,F403
from .write.log_writer import MAX_TIMESTAMP_MS, AppendResult, LogWriter, unique_writer_id  # noqa: F401

Broker = LogWriter
