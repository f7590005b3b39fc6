"""Fixtures: a broker over a file root serving the schema registry too (one per module)."""
from __future__ import annotations

import pytest

from tests.helpers.registry_broker import start_broker


@pytest.fixture(scope="module")
def module_root(tmp_path_factory):
    return "file://" + str(tmp_path_factory.mktemp("registry-root"))


@pytest.fixture(scope="module")
def broker(module_root):
    b = start_broker(module_root)
    yield b
    b.stop()


@pytest.fixture(scope="module")
def registry_url(broker):
    return broker.server.schema_registry.url
