"""``kafkastore sql``: Spark SQL over every topic and warehouse table.

The naming, the registration of views and :func:`run_sql` are in
:mod:`pipelines.sql.query`; the SQL text (statements, names, ``sql/views``) is
:mod:`pipelines.sql.statements`, the DataFrame behind each view :mod:`pipelines.sql.frames`
and the printing of results :mod:`pipelines.sql.output`. Their public names are
re-exported here, so ``from pipelines.sql import run_sql`` keeps working.
"""
from __future__ import annotations

from .frames import (FILES_DDL, OFFSETS_DDL, SNAPSHOTS_DDL,  # noqa: F401 (re-exported)
                     WAREHOUSE_OFFSETS_DDL, TableRead, files_frame, offsets_frame,
                     snapshots_frame, spark_ddl, table_frame, topic_frame,
                     warehouse_offsets_frame)
from .output import to_json_value, write_jsonl, write_table  # noqa: F401 (re-exported)
from .query import (META_VIEWS, SQL_DIR, VIEWS_DIR, is_dead_letter_table, log,  # noqa: F401
                    plan_names, register_views, run_sql, sanitize)
from .statements import (read_sql_files, referenced_names,  # noqa: F401 (re-exported)
                         split_statements, sql_views_in)
