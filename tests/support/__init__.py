"""What the tests share that is not a test: builders, harnesses, subprocess runners.

The loopback fakes of the platform and model APIs are beside it, in tests/fakes/.
"""
