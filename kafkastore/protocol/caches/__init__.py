"""What one broker keeps in memory of the root: topic metadata and latest manifests
(:mod:`.metadata_cache`), topic ids (:mod:`.topic_ids`), segment bytes
(:mod:`.fetch_cache`), and the wake-ups of parked long-poll fetches (:mod:`.data_watch`)."""
