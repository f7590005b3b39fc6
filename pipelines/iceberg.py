"""Moved to pipelines.warehouse: catalog (Warehouse, table creation), snapshots (ancestry,
history, time travel), offsets (the offsets protocol), commit (the exactly-once commit)
and reads (one snapshot's files and rows); the property names are in
pipelines.warehouse.properties. This old import path stays for one release."""
from .warehouse.catalog import *  # noqa: F401,F403
from .warehouse.catalog import _local_path, _metadata_version  # noqa: F401
from .warehouse.catalog import name_of as _name  # noqa: F401
from .warehouse.commit import *  # noqa: F401,F403
from .warehouse.commit import (_build, _delete_filter, _keep_mask, _offset_bound,  # noqa: F401
                               _rewind_files, _safe, _single_topic_partition, _TableTarget)
from .warehouse.offsets import *  # noqa: F401,F403
from .warehouse.properties import *  # noqa: F401,F403
from .warehouse.reads import *  # noqa: F401,F403
from .warehouse.snapshots import *  # noqa: F401,F403
from .warehouse.snapshots import _expired_then  # noqa: F401
from .warehouse.snapshots import ref_head as _ref_head  # noqa: F401
