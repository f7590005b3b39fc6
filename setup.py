"""Builds the optional C decoder; metadata lives in setup.cfg.

The extension is optional: if no compiler is found the install still succeeds
and kafkastore uses its pure-Python decoder (same interface, slower).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafkastore.format._native",
            sources=["kafkastore/format/_native.c"],
            extra_compile_args=["-O3", "-std=c11"],
            optional=True,
        )
    ]
)
