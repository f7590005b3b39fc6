"""Moved to pipelines.warehouse.iceberg_internals; this old import path stays for one
release."""
from .warehouse.iceberg_internals import *  # noqa: F401,F403
