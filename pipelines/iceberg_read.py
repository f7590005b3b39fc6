"""Moved to pipelines.warehouse.snapshots (AsOf, its parsers, select_snapshot,
main_ancestry, summary_of, iso) and pipelines.warehouse.reads (read_snapshot,
range_filter); the tag's name is pipelines.warehouse.properties.VALIDATED_TAG. This old
import path stays for one release."""
from .warehouse.properties import VALIDATED_TAG  # noqa: F401
from .warehouse.reads import *  # noqa: F401,F403
from .warehouse.snapshots import *  # noqa: F401,F403
