"""How often a platform's connection renews its health report."""

from __future__ import annotations

from gateway.state.health import REPORT_TTL

# Three chances within the report's life.
RENEW_INTERVAL = REPORT_TTL / 3
