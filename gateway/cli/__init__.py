"""The composition root and the operator's commands: settings read once, adapters wired to
the core, one `gateway` command each (`python -m gateway.cli`). The top of the core: only
this part imports `adapters`.
"""
