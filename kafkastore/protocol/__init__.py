"""The Kafka wire protocol server (``kafkastore serve``), DESIGN.md section 8.

* :mod:`.wire`: codec, frame checks, the message classes kio lacks, the one table of API
  keys, every error code, the error answer to any request.
* :mod:`.apis`: one module per API family (handlers and ``register``), listed once in
  :mod:`.families`.
* :mod:`.coordinators`: the group and transaction state machines, pending transactional
  offsets, producer ids.
* :mod:`.caches`: what a broker keeps in memory of the root.
* At the root: the server (:mod:`.server`), its typed services (:mod:`.services`), the
  handler table (:mod:`.handler_table`), the produce path (:mod:`.appender`), ACLs
  (:mod:`.authorizer`), quotas, metrics, fencing, the live-broker membership
  (:mod:`.membership`), partition placement, and the listener rules (:mod:`.listeners`,
  :mod:`.http_guard`).

The modules' old flat paths (``kafkastore.protocol.api_txn``...) stay importable for one
release from the table of old paths (:mod:`kafkastore.old_paths`), not from files.
"""
