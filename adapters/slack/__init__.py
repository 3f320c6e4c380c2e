"""Slack: Events API over `gateway web` or Socket Mode over `gateway slack`, on slack-bolt.

    inbound.py   events and the /btw command -> Inbound (pure)
    mrkdwn.py    Markdown -> Slack mrkdwn
    sender.py    SlackSender: chat.postMessage / chat.update / thinking signals
    names.py     speakers' display names (users.info, cached in Redis)
    app.py       the bolt AsyncApp and its listeners
    socket.py    the Socket Mode supervisor (reconnect with backoff, health)
    platform.py  SlackPlatform, what the CLI loads
"""

from adapters.slack.platform import SlackPlatform

PLATFORM = SlackPlatform

__all__ = ["PLATFORM", "SlackPlatform"]
