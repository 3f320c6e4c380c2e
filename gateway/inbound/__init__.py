"""The door every adapter calls: access (`access.py`), rate limits, pairing of strangers, chat
commands, and the append and enqueue of a message (`ingest.py`).
"""
