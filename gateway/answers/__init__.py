"""The jobs that are not turns: a `/btw` side question's answer, `/status`, `/usage` and
`/config`, posted by a worker.
"""
