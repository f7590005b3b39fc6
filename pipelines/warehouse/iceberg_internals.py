"""Every use of pyiceberg's private API, in one place (the rest of pipelines/ uses
only its public API).

Each function wraps one private name and says why the public API does not do. A
pyiceberg upgrade that moves one of them breaks here, and only here; the tests of
pipelines.warehouse (commits, schema evolution, table creation) exercise all four.
"""
from __future__ import annotations

from typing import Any, Sequence


def convert_schema(schema):
    """An Iceberg schema from a pyarrow schema (an Iceberg one passes through).

    Why private: ``Catalog._convert_schema_if_needed`` is what ``create_table`` runs on
    a pyarrow schema (name mapping, the v2 type rules); the jobs need the converted
    schema *before* creating the table, to build the partition spec against its field
    ids, and pyiceberg has no public converter for that."""
    from pyiceberg.catalog import Catalog

    return Catalog._convert_schema_if_needed(schema)


def default_table_location(catalog, namespace: str, name: str) -> str:
    """Where ``catalog`` puts a new table ``namespace.name``.

    Why private: ``Catalog._resolve_table_location`` is the catalog's own rule
    (warehouse property, namespace location); an orphaned table is found by looking
    at that location before a create, and no public call answers it without
    creating the table."""
    return catalog._resolve_table_location(None, namespace, name)


def data_files_of(table_metadata, urls: Sequence[str], io) -> list[Any]:
    """The Iceberg data file entries of Parquet files at ``urls``, reading their footers.

    Why private: ``_parquet_files_to_data_files`` is the body of the public
    ``Transaction.add_files``, which also commits; a kafkastore commit adds files, rewinds
    and sets offsets in ONE snapshot of its own, so it needs the entries without the
    commit."""
    from pyiceberg.table import _parquet_files_to_data_files

    return list(_parquet_files_to_data_files(table_metadata, list(urls), io))


def check_schema_compatible(schema, arrow_schema, format_version: int) -> None:
    """Raise ValueError when a Parquet file's ``arrow_schema`` does not fit ``schema``.

    Why private: ``_check_pyarrow_schema_compatible`` is the check ``add_files`` runs;
    :func:`pipelines.warehouse.commit.data_file` builds the entry from a footer the executor
    kept (no read of the file), so it runs the same check itself."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    _check_pyarrow_schema_compatible(schema, arrow_schema, format_version=format_version)
