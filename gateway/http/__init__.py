"""`gateway web`: the HTTP app's routes (`app.py`), the limits every request is held to
(`limits.py`), and the app served by uvicorn (`serve.py`).
"""
