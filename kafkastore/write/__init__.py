"""Writing the log: the one segment writer, importing Kafka partition directories, and
the `produce` input (JSON lines).

Import the modules themselves; this package re-exports nothing.
"""
