"""Settings: the environment's, read once and validated at start (`env.py`), the settings by
scope stored in Redis (`scoped.py`), and the value types both parse (`values.py`).
"""
