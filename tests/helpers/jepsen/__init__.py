"""Jepsen-style fault harness helpers (an S3 fault proxy so far; see s3_fault_proxy)."""
