"""Moved to pipelines.warehouse.files; this old import path stays for one release."""
from .warehouse.files import *  # noqa: F401,F403
