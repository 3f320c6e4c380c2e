"""Feedback on replies: the messages that carry thumbs up and down, and each clicker's
vote, its log and its /metrics counters (`store.py`)."""
