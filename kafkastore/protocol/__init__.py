"""The Kafka wire protocol: codec (:mod:`.codec`), handler registry (:mod:`.registry`) and the
broker server (:mod:`.server`, ``kafkastore serve``). DESIGN.md section 8."""
