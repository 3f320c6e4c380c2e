"""What the gateway keeps in Redis: the connection and every key name (`keys.py`), the Lua
scripts, sessions, job streams, leases, counters, the console runs' streams, connection
health, sealed secrets and the removal of idle sessions. The bottom of the pipeline: every
other part reads and writes through it.
"""
