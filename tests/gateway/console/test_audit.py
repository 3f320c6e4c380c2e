"""The audit log: newest first, capped, every field kept."""

from __future__ import annotations

from redis.asyncio import Redis

from gateway.console.audit import AuditLog


async def test_entries_come_back_newest_first_with_every_field(redis_client: Redis) -> None:
    log = AuditLog(redis_client)
    await log.record("Dana", "reset", "slack:T1:C1", "10.0.0.1")
    await log.record("Lee", "setting", "slack:T1", "10.0.0.2", "model = openai/x")
    found = await log.recent()
    assert [(e.who, e.action, e.target, e.address, e.detail) for e in found] == [
        ("Lee", "setting", "slack:T1", "10.0.0.2", "model = openai/x"),
        ("Dana", "reset", "slack:T1:C1", "10.0.0.1", ""),
    ]
    assert found[0].at >= found[1].at > 0


async def test_the_log_keeps_only_the_newest(redis_client: Redis) -> None:
    log = AuditLog(redis_client, kept=3)
    for i in range(5):
        await log.record("x", "stop", f"t:w:c{i}", "a")
    assert [e.target for e in await log.recent()] == ["t:w:c4", "t:w:c3", "t:w:c2"]
