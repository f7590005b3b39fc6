"""Kafka's wire format as the broker speaks it: framing and the request header
(:mod:`.codec`), the bounded pre-scan of request bodies (:mod:`.frame_check`), the message
classes kio lacks (:mod:`.legacy_messages`), the one table of API keys (:mod:`.api_keys`),
every error code (:mod:`.error_codes`) and the error answer to any request
(:mod:`.error_responses`). Pure; imports nothing of the protocol outside this package."""
