"""``python -m kafkastore.cli``: the log's commands (the ``kafkastore`` console script is
``pipelines.cli:main``, which adds the jobs' commands)."""
import sys

from .entry import main

if __name__ == "__main__":
    sys.exit(main())
