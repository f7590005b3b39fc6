"""Helpers shared by test modules (test modules never import each other; tests/test_layers.py
checks). ``tests/faults.py`` (FaultyFS), ``tests/protocol/wire.py`` (a raw connection) and the
fixtures of tests/conftest.py are shared too."""
