"""The log's command line entry point: :func:`main` parses, loads the config and runs one
command; errors the user can act on (:class:`KafkaStoreError`) are one line on stderr with
exit status 1, usage errors exit with status 2 (argparse).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from ..errors import KafkaStoreError
from .log_config import Config, load_config
from .parser import build_parser


def _run(args, cfg: Config) -> int:
    return args.func(args, cfg)


def main(argv: list[str] | None = None, *, parser: argparse.ArgumentParser | None = None,
         run: Callable[[argparse.Namespace, Config], int] | None = None,
         load: Callable[..., Config] = load_config) -> int:
    """Run one command: the log's commands (:func:`build_parser`), or those of ``parser`` with
    ``run`` and the config ``load``-er (the ``kafkastore`` console script passes the jobs'
    ones: :mod:`pipelines.cli`, :mod:`pipelines.spec.job_config`)."""
    args = (parser or build_parser()).parse_args(argv)
    try:
        cfg = load(args.conf, root=args.root)
        return (run or _run)(args, cfg)
    except KafkaStoreError as exc:
        message = " ".join(str(exc).split())  # one line, whatever the message holds
        print(f"kafkastore: error: {message}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `kafkastore consume ... | head`: the reader went away; not an error.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print("kafkastore: interrupted; nothing uncommitted is visible", file=sys.stderr)
        return 130
