"""Fresh storage roots on every backend (file, memory, moto's S3 through the ``s3_endpoint``
fixture of tests/conftest.py)."""
from __future__ import annotations

import uuid

BACKENDS = ("file", "memory", "s3")


def make_root_url(backend: str, tmp_path, request) -> str:
    """A fresh, empty root URL on ``backend``."""
    unique = uuid.uuid4().hex[:12]
    if backend == "file":
        return f"file://{tmp_path}/root-{unique}"
    if backend == "memory":
        return f"memory://kafkastore-{unique}"
    if backend == "s3":
        request.getfixturevalue("s3_endpoint")
        return f"s3://kafkastore-test/root-{unique}"
    raise ValueError(backend)
