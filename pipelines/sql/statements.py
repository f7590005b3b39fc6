"""SQL text: splitting a script into statements (quotes and comments respected),
the names a statement mentions, and the ``sql/views/*.sql`` files.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from kafkastore.errors import ConfigError


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VIEW_NAME = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:GLOBAL\s+)?TEMP(?:ORARY)?\s+VIEW\s+"
                        r"(?:IF\s+NOT\s+EXISTS\s+)?`?([A-Za-z_][A-Za-z0-9_]*)`?", re.IGNORECASE)


# ---------------------------------------------------------------------------
# statements and sql/ files


def split_statements(text: str) -> list[str]:
    """Split SQL text on ``;`` outside quotes (``'``, ``"``, backticks) and comments.

    Comments stay with their statement; statements holding only comments and
    whitespace are dropped.
    """
    out, buf, i, n = [], [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"`":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" and ch != "`" else 1
            buf.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            buf.append(text[i:j])
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            buf.append(text[i:j])
            i = j
        elif ch == ";":
            out.append("".join(buf))
            buf = []
            i += 1
        else:
            buf.append(ch)
            i += 1
    out.append("".join(buf))
    return [s.strip() for s in out if _strip_comments(s).strip()]


def _strip_comments(sql: str) -> str:
    """The text with comments and quoted strings blanked (for scanning identifiers)."""
    out, i, n = [], 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            j = i + 1
            while j < n and sql[j] != ch:
                j += 2 if sql[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def referenced_names(sql: str) -> set[str]:
    """Lower-cased words of ``sql`` outside strings and comments (a superset of the
    views it reads; backticked names count too)."""
    return {w.lower() for w in _WORD.findall(_strip_comments(sql))}


def read_sql_files(directory: str) -> list[tuple[str, str]]:
    """``[(file name, text)]`` of the ``*.sql`` files in ``directory``, sorted by name."""
    if not directory or not os.path.isdir(directory):
        return []
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".sql"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                out.append((name, f.read()))
    return out


@dataclass(frozen=True)
class _SqlView:
    name: str
    statement: str
    needs: frozenset[str]


def sql_views_in(directory: str | None) -> list[_SqlView]:
    """The views defined by ``CREATE ... TEMPORARY VIEW`` statements in ``directory``."""
    out = []
    for fname, text in read_sql_files(directory or ""):
        for stmt in split_statements(text):
            m = _VIEW_NAME.search(_strip_comments(stmt))
            if not m:
                raise ConfigError(f"{os.path.join(directory, fname)}: every statement must be "
                                  f"CREATE OR REPLACE TEMPORARY VIEW name AS ...")
            out.append(_SqlView(m.group(1), stmt, frozenset(referenced_names(stmt))))
    return out
