"""Slack: Events API over `gateway web` or Socket Mode over `gateway slack`, on slack-bolt.

platform.py    SlackPlatform, what the CLI loads
app.py         the bolt app both transports share: its listeners and their wiring
inbound.py     events, the /btw command and button clicks -> Inbound / Decision (pure)
clicks.py      approval clicks (block_actions): decided, a refusal told ephemerally
render.py      Markdown -> Slack mrkdwn
sender.py      SlackSender: chat.postMessage / chat.update / thinking signals, assistant status
errors.py      SlackApiError as the core's errors (`core_error`), as on every platform
connection.py  the Socket Mode supervisor (reconnect with backoff, health)
http.py        POST /slack/events: signature and body checked before bolt sees it
client.py      the Web API client every part builds (SLACK_API_URL, no retries)
files.py       shared files' private URLs, with the bot token
names.py       speakers' display names (users.info, cached in Redis)
oauth.py       many workspaces: bolt's OAuth flow settings, the OAuth state in Redis
installations.py  bolt's installation store on Redis, tokens encrypted at rest
rotation.py    expiring bot tokens refreshed before they expire, one process at a time
workspaces.py  each workspace's token, for the replies workers send
"""

from adapters.slack.platform import SlackPlatform

__all__ = ["SlackPlatform"]
