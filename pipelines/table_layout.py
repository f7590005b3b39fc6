"""Moved to pipelines.spec.table_layout (a table's layout and the table modes); this old
import path stays as an alias for one release and holds no code."""
from __future__ import annotations

from pipelines.spec.table_layout import (  # noqa: F401
    check_mode, dead_letter_table, DEAD_LETTERS_SUFFIX, DEFAULT_COMPRESSION,
    DEFAULT_KEY_COLUMNS, DEFAULT_MAX_ROWS_PER_FILE, DEFAULT_NAMESPACE,
    DEFAULT_PARTITION_BY, KEY_COLUMNS_PROPERTY, LOAD_PROPERTIES, LOAD_PROPERTY_PREFIX,
    mode_properties, MODE_PROPERTY, MODES, NAME_RE, parse_key_columns,
    parse_partition_field, table_identifier, table_mode, table_name, TableLayout,
    TOMBSTONE, add_layout_flags, APPEND_ROW_ORDER, FIXED_FIELDS, LAYOUT_CONFIG_KEYS,
    LAYOUT_FIELDS, LAYOUT_FIELDS_BY_NAME, layout_entry_from_flags, layout_flags, LayoutField,
    parse_given_key_columns, parse_mode, parse_partition_by, undeclared_layout_fields,
)
