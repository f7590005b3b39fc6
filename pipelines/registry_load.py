"""Moved to pipelines.jobs.registry_load (loads that follow a schema registry); this old
import path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.jobs.registry_load import (  # noqa: F401
    commit_extras, CommitExtras, conflicts, group_key, INFO_DDL, KAFKA_COLUMNS,
    KEY_SCHEMA_IDS_KEY, load_files, registry_writer, RegistryPlan, SCHEMA_IDS_KEY,
    table_key_type, table_value_type, write_registry_ranges,
)
