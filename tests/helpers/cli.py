"""Running a ``main(argv)`` of the command line in-process, as the CLI tests do."""
from __future__ import annotations

import io
import sys


def cli_runner(main, capsys, monkeypatch, root: str | None):
    """``run(*argv, stdin=..., root=...) -> (exit status, stdout, stderr)``: ``main`` with
    ``--root root`` first (none when ``root`` is None) and ``stdin`` (str or bytes) as
    standard input. ``run.root`` is the default root."""

    def run(*argv, stdin: str | bytes | None = None, root: str | None = root):
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else stdin
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        capsys.readouterr()
        rc = main((["--root", root] if root is not None else []) + list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    run.root = root
    return run


def one_error_line(rc: int, err: str) -> str:
    """The one ``kafkastore: error: ...`` line of a failed command (asserted)."""
    assert rc == 1
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kafkastore: error: "), err
    return lines[0]


def write_conf(tmp_path, text: str) -> str:
    """``text`` as the config file ``k.yaml`` under ``tmp_path``; its path."""
    path = tmp_path / "k.yaml"
    path.write_text(text)
    return str(path)


def config_error(load_config, tmp_path, text: str) -> str:
    """The message of the ConfigError ``load_config`` raises on a file holding ``text``
    (asserted: raised, and one line)."""
    from kafkastore.errors import ConfigError

    try:
        load_config(write_conf(tmp_path, text))
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    raise AssertionError(f"no ConfigError for {text!r}")


#: The environment variables the config reads; tests of precedence clear them.
CONFIG_ENV = ("KAFKASTORE_ROOT", "KAFKASTORE_CONF", "KAFKASTORE_WAREHOUSE", "KAFKASTORE_SPARK_MASTER")
