"""The coordinators' pure state machines (:mod:`.group`: Kafka's classic group
protocol; :mod:`.txn`: the transaction coordinator), where open transactions' offsets wait
(:mod:`.pending_offsets`) and root-wide producer ids (:mod:`.producer_ids`). The services
that run them on a broker are in :mod:`kafkastore.protocol.apis.groups` and
:mod:`.txn_service`."""
