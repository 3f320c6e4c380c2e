"""Loopback fakes of the outside services the gateway talks to."""
