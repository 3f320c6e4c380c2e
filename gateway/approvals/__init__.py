"""Approvals of destructive tool calls: the requests and their decisions in Redis (`store.py`),
and a tool loop's calls waiting on them (`waiting.py`).
"""
