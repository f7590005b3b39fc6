"""Moved to pipelines.jobs.load (one topic into one table) and pipelines.jobs.load_many
(many topics into many tables); this old import path stays as
an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.jobs.load import (  # noqa: F401
    base_decoded_schema, check_before_creating, CreatedTables, current_user,
    dead_letter_schema, ensure_tables, file_schema, file_writer, JobSummary,
    kafka_frame, load, load_for_interval, load_options_from_args, LoadRequest,
    LoadSummary, log, nullable, Progress, raw_schema, record_load_properties,
    request_of, run_load, split_reader, write_job, write_ranges, WriteTarget, Written,
    TableRun, plan_table_load, TableWrite, prepare_write, write_and_commit, commit_written,
)
from pipelines.jobs.load_many import (  # noqa: F401
    ManyLoadSummary, ManyLoadRequest, load_many, route_value_counts,
    load_many_options_from_args, load_many_for_interval,
)
