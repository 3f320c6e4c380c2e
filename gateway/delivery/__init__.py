"""A reply on its way to the platform: cut into pieces that fit (`splitting.py`), paced and
streamed into edited messages (`stream.py`).
"""
