"""Telegram, on python-telegram-bot: webhook on `gateway web`, or long polling.

platform.py    TelegramPlatform, what the CLI loads
inbound.py     update -> Inbound or Decision (pure): what is a message to the bot, sessions,
               addresses, a callback query's click
clicks.py      approval clicks (callback queries): decided, every query answered
render.py      Markdown -> Telegram HTML, and the length Telegram counts
sender.py      TelegramSender: sendMessage / editMessageText / sendChatAction, the feedback
               keyboard, drafts in private chats (NativeStreams)
drafts.py      TelegramDraft: a private chat's reply as a draft (sendMessageDraft), ended by
               sendMessage; Telegram's refusal of drafts as StreamRefused
formatting.py  a text sent as HTML, and again as plain text when Telegram cannot parse it
errors.py      telegram.error.* as the core's errors (`core_error`), RetryAfter's delay
connection.py  `gateway telegram`: getUpdates, confirming each update after ingest
http.py        POST /telegram/webhook with the secret-token check
client.py      the Bot API client (plain `Bot`, no retries) the sender and the poller share,
               and what the process sets once when TelegramPlatform is made
files.py       TelegramFileSource: getFile -> the file's URL; refusals as the reason a user reads
"""

from adapters.telegram.platform import TelegramPlatform

__all__ = ["TelegramPlatform"]
