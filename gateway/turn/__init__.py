"""One main turn, step by step: the claim on its session, the request prepared, the model call
(started early where it can), the tool loop, the reply and the record of it.
"""
