-- An album's items: Telegram sends each photo of an album as a message of its own,
-- all sharing a media_group_id. They are gathered into the first one's inbox entry
-- while it waits there, so the album is one user message; the claim holds the turn
-- while items are still arriving (the `album` key, see claim.lua).
local ALBUM_SCAN = 20 -- the newest inbox entries searched for the album's first item

-- `piece`'s attachments and text added to `first` (texts joined by a blank line).
local function album_merge(first, piece)
  local attachments = type(first.attachments) == 'table' and first.attachments or {}
  for _, attachment in ipairs(piece.attachments or {}) do
    table.insert(attachments, attachment)
  end
  -- cjson writes an empty table as an object: an album without files has no list.
  first.attachments = #attachments > 0 and attachments or nil
  local text = piece.text or ''
  if text ~= '' then
    first.text = (first.text or '') == '' and text or (first.text .. '\n\n' .. text)
  end
  return first
end

-- Join `entry` (JSON) to the inbox entry of the same album when one is still waiting
-- there; false when there is none (the entry then becomes a message of its own).
local function join_album(inbox, entry, group)
  local newest = redis.call('LRANGE', inbox, -ALBUM_SCAN, -1)
  for i = #newest, 1, -1 do
    local ok, found = pcall(cjson.decode, newest[i])
    if ok and type(found) == 'table' and found.media_group == group then
      local merged = album_merge(found, cjson.decode(entry))
      redis.call('LSET', inbox, i - #newest - 1, cjson.encode(merged))
      return true
    end
  end
  return false
end
