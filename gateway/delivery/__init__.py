"""A reply on its way to the platform: cut into pieces that fit (`splitting.py`), within
the chat's send pacing (`pacing.py`), streamed into edited messages (`stream.py`).
"""
