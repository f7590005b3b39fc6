"""The jobs' old import paths (the flat ``pipelines/*.py`` before the packages) -> their
homes, served by the import hook of :mod:`kafkastore.old_paths` (``pipelines/__init__.py``
installs this table). An old path holds no file and no code."""
from __future__ import annotations

from kafkastore.old_paths import Moved

_WH = "pipelines.warehouse"

#: pipelines' old module paths -> their homes.
OLD_PATHS: dict[str, Moved] = {
    "pipelines.avro_columns": Moved("pipelines.decoding.avro_columns"),
    "pipelines.cdc": Moved("pipelines.decoding.cdc"),
    "pipelines.compaction": Moved("pipelines.jobs.log_compaction"),
    "pipelines.config": Moved("pipelines.spec.job_config"),
    "pipelines.datasource": Moved("pipelines.source.datasource"),
    "pipelines.debezium_types": Moved("pipelines.decoding.debezium_types"),
    "pipelines.field_ids": Moved(f"{_WH}.field_ids"),
    "pipelines.iceberg": Moved(
        f"{_WH}.catalog", f"{_WH}.commit", f"{_WH}.offsets", f"{_WH}.properties",
        f"{_WH}.reads", f"{_WH}.snapshots",
        renamed={"_name": f"{_WH}.catalog.name_of", "_ref_head": f"{_WH}.snapshots.ref_head"}),
    "pipelines.iceberg_internals": Moved(f"{_WH}.iceberg_internals"),
    "pipelines.iceberg_read": Moved(f"{_WH}.snapshots", f"{_WH}.reads",
                                    renamed={"VALIDATED_TAG": f"{_WH}.properties.VALIDATED_TAG"}),
    "pipelines.lag": Moved("pipelines.jobs.lag"),
    "pipelines.load": Moved("pipelines.jobs.load", "pipelines.jobs.load_many"),
    "pipelines.load_spec": Moved("pipelines.spec.load_spec"),
    "pipelines.maintain": Moved("pipelines.jobs.maintain"),
    "pipelines.offset_ranges": Moved("pipelines.spec.offset_ranges"),
    "pipelines.planning": Moved("pipelines.source.planning"),
    "pipelines.proto_text": Moved("pipelines.decoding.proto_text"),
    "pipelines.registry_client": Moved("pipelines.decoding.registry_client"),
    "pipelines.registry_load": Moved("pipelines.jobs.registry_load"),
    "pipelines.reprocess": Moved("pipelines.jobs.reprocess"),
    "pipelines.retention_job": Moved("pipelines.jobs.log_retention"),
    "pipelines.schema_decoding": Moved("pipelines.decoding.schema_decoding"),
    "pipelines.schema_evolution": Moved("pipelines.decoding.schema_evolution"),
    "pipelines.session": Moved("pipelines.source.session"),
    "pipelines.source_options": Moved("pipelines.source.options"),
    "pipelines.stream_source": Moved("pipelines.source.stream"),
    "pipelines.table_files": Moved(f"{_WH}.files"),
    "pipelines.table_layout": Moved("pipelines.spec.table_layout"),
    "pipelines.topic_sink": Moved("pipelines.sink.writer"),
    "pipelines.topic_sink_commit": Moved("pipelines.sink.commit"),
    "pipelines.type_mapping": Moved("pipelines.decoding.type_mapping"),
    "pipelines.upsert": Moved("pipelines.jobs.upsert"),
    "pipelines.vacuum": Moved("pipelines.jobs.vacuum"),
}
