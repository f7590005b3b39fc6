"""Moved to pipelines.warehouse.field_ids; this old import path stays for one release."""
from .warehouse.field_ids import *  # noqa: F401,F403
