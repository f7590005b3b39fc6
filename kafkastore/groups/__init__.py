"""Consumer groups in the log: the `__consumer_offsets` records and store, and offline
group administration.

Import the modules themselves; this package re-exports nothing.
"""
