"""Operator commands over what a run wrote: status, verify (with its checksums), maintain,
and the metrics a run leaves behind."""
