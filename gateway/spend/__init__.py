"""What model calls spend: each call's tokens and cost recorded (`usage.py`), and the spend
caps checked and held before a turn or side question runs (`budgets.py`).
"""
