"""Moved to pipelines.sink.commit (the driver's commit of writes into topics); this old
import path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.sink.commit import (  # noqa: F401
    ABORT_EPOCH, abort_job, attempt_note_path, closed_path, commit_job, job_record_path,
    KEEP_STREAM_RECORDS, last_committed_batch, new_job_prefix, prefix_of, print_progress,
    producer_id, PROGRESS_INTERVAL_S, RECORD_FORMAT, recover_jobs, recover_stream, SINK_DIR,
    stream_job, stream_prefix, stream_record_path, TASK_EPOCH, TaskResult, write_task,
)
