"""One module per Kafka API family: its handlers and its ``register(table)``.

:data:`kafkastore.protocol.families.FAMILIES` lists them in registration order; a family
registers each of its keys once (the handler table refuses a second registration)."""
