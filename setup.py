"""Builds the optional C extensions; metadata lives in setup.cfg.

Both are optional: if no compiler is found the install still succeeds and
kafkastore uses its pure-Python code (same interface, slower).
"""
from glob import glob

from setuptools import Extension, setup

COMPILE = ["-O3", "-std=c11", "-fvisibility=hidden"]

setup(
    ext_modules=[
        # The byte-format kernel: record batches <-> Arrow columns, CRC-32C, murmur2.
        Extension("kafkastore.format._native", sources=sorted(glob("kafkastore/format/native/*.c")),
                  depends=glob("kafkastore/format/native/*.h"), extra_compile_args=COMPILE,
                  optional=True),
        # `produce` input: JSON lines into Arrow columns (kafkastore.jsonl_bulk's fast path).
        Extension("kafkastore._jsonl_native", sources=["kafkastore/_jsonl_native.c"],
                  include_dirs=["kafkastore"], depends=["kafkastore/format/native/utf8.h", "kafkastore/format/native/pymodule.h"],
                  extra_compile_args=COMPILE, optional=True),
    ]
)
