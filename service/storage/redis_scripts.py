"""The Redis layout of :class:`~service.storage.redis_store.RedisStateStore`: its keys and
the Lua scripts that read and write them atomically.

Key layout (every key of a policy shares the hash tag ``{<policy>}``, so a policy lives
in one Redis Cluster slot and its Lua scripts touch a single slot)::

    bandit:{p}:k:<key>     value bytes of the state part <key> (arm:<id>, shared, ...)
    bandit:{p}:versions    hash <key> -> version of that value (absent: version 0)
    bandit:{p}:clock       counter the versions are drawn from
    bandit:{p}:counters    hash <name> -> float (HINCRBYFLOAT)
    bandit:{p}:deadlines   sorted set event id -> deadline (unix seconds)
    bandit:{p}:seen        sorted set name (arm id) -> last seen (unix seconds)
    bandit:{p}:claimed     hash job -> the last period claimed (``claim_period``)
    bandit:policies        set of policy names                 (global)
    bandit:event:<id>      owning policy of an event, SET NX EX (global; the id
                           percent-encoded, ``registry_key``)
"""

from __future__ import annotations

from urllib.parse import quote

from bandit_core.errors import InvalidInputError

POLICIES_KEY = "bandit:policies"
"""The set of policy names (global)."""


def reply_text(value: object) -> str:
    """A member, field or value a Redis reply holds, as text: bytes (the store's
    connection does not decode responses), typed by redis-py as any of its reply types."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    raise TypeError(f"unexpected Redis reply item {value!r}")


def policy_prefix(policy: str) -> str:
    """The prefix of every key of ``policy``: ``bandit:{<policy>}:`` (one hash tag, one
    cluster slot); a name with braces would break the tag and is refused."""
    if not policy or "{" in policy or "}" in policy:
        raise InvalidInputError(
            f"policy must be a non-empty name without braces, but got {policy!r}"
        )
    return f"bandit:{{{policy}}}:"


def glob_literal(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern (``HSCAN ... MATCH``): its ``*?[]\\``
    escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def registry_key(event_id: str) -> str:
    """The global key naming the policy that owns ``event_id``: the id percent-encoded
    (UTF-8) but for letters, digits and ``_.:-~``, so the key has no braces (no Redis
    Cluster hash tag an id could choose) and two ids never share a key (``%`` itself is
    encoded). Ids of those characters only keep the key they always had."""
    return f"bandit:event:{quote(event_id, safe='_.:-~')}"


# KEYS: versions hash, value keys...; ARGV[1]: the known version of each key, comma
# separated (-1: unknown). A key's field in the versions hash is its name after the
# prefix ("<prefix>versions" / "<prefix>k:<field>"), so fields are not sent again: at
# K = 50 the call packs 52 arguments instead of 154 (redis-py packs them in Python).
# Returns flat triples (index, version, data) for the keys whose version differs.
READ_SCRIPT = """
local skip = #KEYS[1] - #'versions' + #'k:'
local known = {}
for v in string.gmatch(ARGV[1], '[^,]+') do known[#known + 1] = tonumber(v) end
local out = {}
for i = 2, #KEYS do
  local v = tonumber(redis.call('HGET', KEYS[1], string.sub(KEYS[i], skip + 1)) or '0')
  if v ~= known[i - 1] then
    out[#out + 1] = i - 1
    out[#out + 1] = v
    out[#out + 1] = (v > 0 and redis.call('GET', KEYS[i])) or ''
  end
end
return out
"""

# KEYS: versions hash, clock, deadlines, counters, seen, value keys...; ARGV: clock
# seed, the event id to schedule ('' none), its deadline, the number c of counters, c
# pairs (name, increment), the number s of seen names, s pairs (name, time), the number
# e of more events to schedule, e pairs (deadline, event id), then per key its field, the version the transaction read, and an op ('' keep, 's' set, 'd'
# delete), then the data of each 's' in key order. Returns the new version, or -1
# (nothing written) when a version moved.
COMMIT_SCRIPT = """
local n = #KEYS - 5
local c = tonumber(ARGV[4])
local s = tonumber(ARGV[5 + 2 * c])
local e = tonumber(ARGV[6 + 2 * c + 2 * s])
local b = 6 + 2 * c + 2 * s + 2 * e
for i = 1, n do
  local v = tonumber(redis.call('HGET', KEYS[1], ARGV[b + 3 * i - 2]) or '0')
  if v ~= tonumber(ARGV[b + 3 * i - 1]) then return -1 end
end
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SET', KEYS[2], ARGV[1]) end
local version = redis.call('INCR', KEYS[2])
local d = b + 3 * n + 1
for i = 1, n do
  local op = ARGV[b + 3 * i]
  if op == 's' then
    redis.call('SET', KEYS[i + 5], ARGV[d])
    redis.call('HSET', KEYS[1], ARGV[b + 3 * i - 2], version)
    d = d + 1
  elseif op == 'd' then
    redis.call('DEL', KEYS[i + 5])
    redis.call('HDEL', KEYS[1], ARGV[b + 3 * i - 2])
  end
end
if ARGV[2] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
  for j = 1, c do redis.call('HINCRBYFLOAT', KEYS[4], ARGV[3 + 2 * j], ARGV[4 + 2 * j]) end
  for j = 1, s do redis.call('ZADD', KEYS[5], ARGV[5 + 2 * c + 2 * j], ARGV[4 + 2 * c + 2 * j]) end
  local m = 6 + 2 * c + 2 * s
  for j = 1, e do redis.call('ZADD', KEYS[3], ARGV[m + 2 * j - 1], ARGV[m + 2 * j]) end
end
return version
"""

# KEYS: versions, clock, counters, deadlines, seen, claimed; ARGV: the value-key prefix.
DELETE_SCRIPT = """
local fields = redis.call('HKEYS', KEYS[1])
for _, f in ipairs(fields) do redis.call('DEL', ARGV[1] .. f) end
return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
"""

# KEYS: the claims hash; ARGV: job, period. 1 (and the period recorded) if the period
# is later than the job's last claimed one, else 0.
CLAIM_PERIOD_SCRIPT = """
local last = redis.call('HGET', KEYS[1], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS: the last-seen index; ARGV: time, limit. Takes the names seen at or before the
# time off the index, oldest first, and returns them.
TAKE_IDLE_SCRIPT = """
local names = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, name in ipairs(names) do redis.call('ZREM', KEYS[1], name) end
return names
"""
