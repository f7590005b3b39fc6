"""Documents a whole root shares: the versioned cluster documents, ACLs, SCRAM users.

Import the modules themselves; this package re-exports nothing.
"""
