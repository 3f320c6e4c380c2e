"""The operator console: `/admin` on `gateway web`.

Server-rendered pages (Jinja2 through Starlette) over the state the rest of the
gateway keeps in Redis, read and changed through the core's own stores, never by
reading keys by hand. Nothing here is reachable without a sign-in (`access.py`);
every change carries the sign-in's CSRF token and is written to the audit log
(`audit.py`). The live parts are server-sent events polled from Redis (`live.py`),
so every `gateway web` shows the whole deployment.
"""
