"""Writing the log: the library's writer (:mod:`~kafkastore.write.log_writer`, with its
batching and Arrow path), the one segment writer, offline transaction aborts, importing
Kafka partition directories, and the `produce` input (JSON lines).

Import the modules themselves; this package re-exports nothing.
"""
