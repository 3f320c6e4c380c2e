"""`gateway web`: the HTTP app's routes (`app.py`) and the limits every request is held to
(`limits.py`).
"""
