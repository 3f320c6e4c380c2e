"""The model request of a turn or side question: compiled from the session's history,
reminders and media, counted in tokens, and kept within the window by compression.
"""
