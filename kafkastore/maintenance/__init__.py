"""What runs beside the writers: merging small segments (and the housekeeper),
log compaction, retention and delete-records, garbage collection.

Import the modules themselves; this package re-exports nothing.
"""
