"""Moved to kafkastore.cli.entry (main), kafkastore.cli.parser (build_parser and the argument
types), kafkastore.cli.commands (the log's commands) and kafkastore.cli.serve (serve, users,
quotas: the commands that start or configure the protocol server); ``kafkastore.cli`` keeps
its API (``main``, ``build_parser``, ``flag``...) for one release. ``python -m kafkastore.cli``
runs :mod:`kafkastore.cli.__main__`.
"""
from .commands import *  # noqa: F401,F403
from .commands import _storage  # noqa: F401 (imported from the old path)
from .entry import main  # noqa: F401
from .log_config import Config, load_config  # noqa: F401
from .parser import build_parser, flag, non_negative, positive  # noqa: F401
from .serve import cmd_quotas, cmd_serve, cmd_users  # noqa: F401
