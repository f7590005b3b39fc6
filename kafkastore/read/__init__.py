"""Reading the log: the partition reader (fetch by offset or timestamp, read plans,
checked reads) and verification of what the manifest lists.

Import the modules themselves; this package re-exports nothing.
"""
