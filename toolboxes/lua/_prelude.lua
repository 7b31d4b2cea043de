-- The trusted prelude of every Lua call: it confines the fresh state, installs the time-limit hook, builds the
-- modules (json, text, time, fs, http, tools), runs the script and encodes its return values as JSON.
--
-- Called by _runtime.py as a chunk with these arguments (all plain Lua values except the two host callables, which
-- live only in this chunk's locals and are never reachable from the script: no `debug` library, no upvalue access):
--   expired  host callable () -> boolean: true once the call's deadline passed or it was cancelled
--   host     host callable (op, ...) -> ok, ...: the Python side of fs, http, tools, time (see _host.py)
--   script   the script text
--   COUNT    instructions between two deadline checks
--   MAX_OUT  the largest JSON text of the return values, in bytes
--   PATTERNS the source of _patterns.lua (string.find/match/gmatch/gsub with a bounded worst case)
-- Returns `true, values_json, output` or `false, kind, message`.
-- Every refusal of the sandbox raises a Lua error whose message starts with "sandbox: ".
local expired, host, script, COUNT, MAX_OUT, PATTERNS = ...

local G = _G
local sethook, getinfo = debug.sethook, debug.getinfo
local PRELUDE_SRC = getinfo(1, "S").source
local raw_load, raw_cg, raw_setmt, raw_getmt = load, collectgarbage, setmetatable, getmetatable
local type, error, pcall, xpcall, tostring, select, next, pairs, ipairs, rawget, rawequal, tonumber =
    type, error, pcall, xpcall, tostring, select, next, pairs, ipairs, rawget, rawequal, tonumber
local co_create, co_resume, co_close, co_running = coroutine.create, coroutine.resume, coroutine.close,
    coroutine.running
local s_find, s_gsub, s_sub, s_byte, s_char, s_format, s_rep, s_lower, s_upper =
    string.find, string.gsub, string.sub, string.byte, string.char, string.format, string.rep, string.lower,
    string.upper
local t_concat, t_sort, t_pack, t_unpack = table.concat, table.sort, table.pack, table.unpack
local m_type, m_tointeger, m_huge, m_floor = math.type, math.tointeger, math.huge, math.floor
local utf8_char, utf8_len = utf8.char, utf8.len
local os_time, os_date, os_clock = os.time, os.date, os.clock

-- 1. The time limit. The hook runs every COUNT instructions in every thread (coroutines get it from the wrapped
-- coroutine.create/wrap below: new coroutines do not inherit hooks in Lua 5.4). Once the deadline passed it re-arms
-- itself to fire on every instruction of the thread it runs in and of the main thread, so a pcall that swallows the
-- error meets it again on its very next instruction.
local main_thread = co_running()
local timed_out = false
local TIMEOUT_MSG = "timeout: the script ran past its time limit"
local function hook()
  if timed_out or expired() then
    timed_out = true
    sethook(hook, "", 1)
    sethook(main_thread, hook, "", 1)
    error(TIMEOUT_MSG, 0)
  end
end

-- The hook alone does not hold in two places (Lua 5.4, ldo.c/ldebug.c):
-- * luaD_hook clears L->allowhook while the hook runs, and an error raised in the hook calls the message handler of
--   an enclosing xpcall (luaG_errormsg) before anything sets it back: the handler runs with hooks off, so a handler
--   that loops never meets the hook again. The wrapped xpcall below runs the script's handler in a fresh coroutine,
--   whose allowhook is 1 and whose hook is armed (and not at all once the deadline passed).
-- * The hook is a Lua function that ldblib's C hook calls with lua_call: near the C-stack limit (LUAI_MAXCCALLS,
--   200 nested C calls) that call fails with "C stack overflow" (luaE_checkcstack) before the hook runs, so it never
--   looks at the clock, and a pcall one level up swallows the error. `local function f() pcall(f) return f() end`
--   spends all its time at that depth. So every construct that catches errors (pcall, xpcall, coroutine.resume,
--   coroutine.wrap, coroutine.close, load with a reader function) is wrapped: when it caught an error it asks the
--   clock itself, and once the deadline passed it re-raises the timeout (it is uncatchable from then on). If the
--   clock cannot be asked at that depth either, that error goes up to the next wrapper, one C level higher.
local function deadline_passed()
  if not timed_out and expired() then
    timed_out = true
    sethook(hook, "", 1)
    sethook(main_thread, hook, "", 1)
  end
  return timed_out
end
local function caught(ok, ...)
  if timed_out or (not ok and deadline_passed()) then
    error(TIMEOUT_MSG, 0)
  end
  return ok, ...
end

-- 2. Errors raised on the script's behalf name the script line that called (the first frame that is neither C nor
-- trusted code: tail calls in the modules would defeat error()'s level). Refusals also carry a kind the runner
-- reports (sandbox, tool_invocation); the message is what the agent reads.
local function located(msg)
  for level = 2, 100 do
    local info = getinfo(level, "Sl")
    if not info then
      break
    end
    if info.what ~= "C" and info.source ~= PRELUDE_SRC and info.source ~= "=patterns" then
      if info.currentline and info.currentline > 0 then
        return info.short_src .. ":" .. info.currentline .. ": " .. msg
      end
      break
    end
  end
  return msg
end
local function fail(msg)
  error(located(msg), 0)
end
local kinds = {}
local function raise(kind, msg)
  kinds[msg] = kind
  error(located(msg), 0)
end
local function refuse(msg)
  raise("sandbox", "sandbox: " .. msg)
end

-- 3. Remove what a script must not have, with a refusal that says so when a script reaches for it. The string
-- table is changed in place: strings share it as their metatable's index.
local removed = {io = "the io library", debug = "the debug library", package = "the package library",
  dofile = "dofile", loadfile = "loadfile", python = "Python"}
for _, name in ipairs({"io", "debug", "package", "dofile", "loadfile", "python", "require", "warn", "print"}) do
  G[name] = nil
end
raw_setmt(G, {__index = function(_, k)
  if removed[k] then
    refuse(removed[k] .. " is not available in the Lua sandbox")
  end
end})
G.os = raw_setmt({time = os_time, date = os_date, clock = os_clock}, {__index = function(_, k)
  refuse("os." .. tostring(k) .. " is not available; the sandbox keeps only os.time, os.date and os.clock")
end})
string.dump = nil
raw_setmt(string, {__index = function(_, k)
  if k == "dump" then
    refuse("string.dump is not available: binary chunks cannot be made or loaded")
  end
end})
local plib = raw_load(PATTERNS, "=patterns", "t", {})(s_find, string.match, string.gmatch, s_gsub, s_byte, s_sub,
  s_char, t_concat, type, tostring, m_tointeger, fail)
string.find, string.match, string.gmatch, string.gsub = plib.find, plib.match, plib.gmatch, plib.gsub
local plain_find = plib.plain_find

G.load = function(chunk, name, mode, env)
  if mode ~= nil and mode ~= "t" then
    refuse("load: only text chunks (mode \"t\") may be loaded; binary chunks are refused")
  end
  if env ~= nil then
    refuse("load: a custom environment is refused; chunks run in the script's own environment")
  end
  if type(chunk) == "string" and s_byte(chunk, 1) == 27 then
    refuse("load: binary (precompiled) chunks are refused")
  end
  if timed_out then
    error(TIMEOUT_MSG, 0)
  end
  local fn, err = raw_load(chunk, name, "t", G)
  if fn == nil and type(chunk) ~= "string" and deadline_passed() then
    error(TIMEOUT_MSG, 0)  -- the reader function ran out of time and load caught it
  end
  return fn, err
end

G.collectgarbage = function(opt)
  if opt == "count" then
    return raw_cg("count")
  end
  refuse("collectgarbage: only collectgarbage(\"count\") is available")
end

G.setmetatable = function(t, mt)
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    refuse("setmetatable: __gc metamethods are not available")
  end
  return raw_setmt(t, mt)
end

local function arm(co)
  sethook(co, hook, "", timed_out and 1 or COUNT)
  return co
end
coroutine.create = function(f)
  return arm(co_create(f))
end
-- pcall and xpcall also bound how deeply they nest in one thread. In the main thread the C stack bounds them (about
-- 200), but in a coroutine Lua 5.4 runs a yieldable pcall without a C frame, so `local function f() pcall(f)
-- return f() end` in a coroutine nests until memory runs out, and unwinding that depth after the deadline costs
-- time quadratic in it (every caught error shrinks the stack, which walks every frame). `depth` is the nesting of
-- the running thread: resuming a coroutine swaps in the coroutine's own count and swaps it back when it yields or
-- ends, so the per-pcall cost is two upvalue writes. Each wrapper restores the count it found on the way out, so
-- an error that skips a level cannot leave it wrong for long.
local MAX_PCALL_NESTING = 100
local depth = 0
local co_depth = raw_setmt({}, {__mode = "k"})
local function resumed(co, caller_depth, ok, ...)
  co_depth[co] = depth
  depth = caller_depth
  return ok, ...
end
local function resume(co, ...)
  local caller_depth = depth
  depth = co_depth[co] or 0
  return resumed(co, caller_depth, co_resume(co, ...))
end
coroutine.resume = function(co, ...)
  if timed_out then
    error(TIMEOUT_MSG, 0)
  end
  return caught(resume(co, ...))
end
coroutine.close = function(co)
  return caught(co_close(co))
end
local function wrap_result(co, ok, ...)
  if ok then
    return ...
  end
  local e = ...
  co_close(co)
  if deadline_passed() then
    error(TIMEOUT_MSG, 0)
  end
  error(e, type(e) == "string" and 2 or 0)
end
coroutine.wrap = function(f)
  local co = arm(co_create(f))
  return function(...)
    if timed_out then
      error(TIMEOUT_MSG, 0)
    end
    return wrap_result(co, resume(co, ...))
  end
end

local function too_deep(fname)
  fail(s_format("%s: protected calls nested deeper than %d levels in one thread", fname, MAX_PCALL_NESTING))
end
local function leave(n, ok, ...)
  depth = n
  if timed_out or (not ok and deadline_passed()) then
    error(TIMEOUT_MSG, 0)
  end
  return ok, ...
end
G.pcall = function(f, ...)
  local n = depth
  if timed_out then
    error(TIMEOUT_MSG, 0)
  elseif n >= MAX_PCALL_NESTING then
    too_deep("pcall")
  end
  depth = n + 1
  return leave(n, pcall(f, ...))
end
-- The script's message handler runs in its own coroutine (see deadline_passed above for why); it gets the error
-- value and its first result is xpcall's second. If it fails, xpcall gives that error instead.
local function run_handler(h, e)
  if timed_out then
    return e
  end
  return select(2, resume(arm(co_create(h)), e))
end
G.xpcall = function(f, h, ...)
  local n = depth
  if timed_out then
    error(TIMEOUT_MSG, 0)
  elseif type(h) ~= "function" then
    fail("bad argument #2 to 'xpcall' (function expected, got " .. type(h) .. ")")
  elseif n >= MAX_PCALL_NESTING then
    too_deep("xpcall")
  end
  depth = n + 1
  return leave(n, xpcall(f, function(e)
    return run_handler(h, e)
  end, ...))
end

-- print collects text (capped) instead of writing to the worker's stdout, which is the protocol pipe.
local out, out_len, OUT_CAP = {}, 0, 1024 * 1024
G.print = function(...)
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do
    parts[i] = tostring((select(i, ...)))
  end
  local line = t_concat(parts, "\t") .. "\n"
  if out_len + #line > OUT_CAP then
    line = s_sub(line, 1, OUT_CAP - out_len)
  end
  out[#out + 1] = line
  out_len = out_len + #line
end

-- 4. json
local json = {}
local array_mt = {__name = "json.array"}
local null = raw_setmt({}, {__name = "json.null", __tostring = function() return "null" end,
  __newindex = function() fail("json.null is read-only") end})
json.null = null

local function arrayify(t)
  return raw_setmt(t, array_mt)
end

local escapes = {['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r",
  ["\t"] = "\\t"}
local function escape_char(c)
  return escapes[c] or s_format("\\u%04x", s_byte(c))
end
local function encode_string(s)
  return '"' .. s_gsub(s, '[%c"\\]', escape_char) .. '"'
end

local function encode_number(x)
  if m_type(x) == "integer" then
    return s_format("%d", x)
  end
  if x ~= x or x == m_huge or x == -m_huge then
    return "null"
  end
  local s = s_format("%.14g", x)
  if tonumber(s) ~= x then
    s = s_format("%.17g", x)
  end
  return s
end

local function key_string(k)
  local tk = type(k)
  if tk == "string" then
    return k
  elseif tk == "number" then
    return encode_number(k)
  end
  error("cannot encode a table with a " .. tk .. " key as JSON", 0)
end

local function is_array(t)
  if raw_getmt(t) == array_mt then
    return true
  end
  local n, max = 0, 0
  for k in next, t do
    if m_type(k) ~= "integer" or k < 1 then
      return false
    end
    if k > max then
      max = k
    end
    n = n + 1
  end
  return n > 0 and max == n
end

local encode_value
encode_value = function(v, buf, seen, depth, indent)
  local tv = type(v)
  if v == nil or rawequal(v, null) then
    buf[#buf + 1] = "null"
  elseif tv == "boolean" then
    buf[#buf + 1] = v and "true" or "false"
  elseif tv == "number" then
    buf[#buf + 1] = encode_number(v)
  elseif tv == "string" then
    buf[#buf + 1] = encode_string(v)
  elseif tv == "table" then
    if seen[v] then
      error("cannot encode a table that contains itself as JSON", 0)
    end
    if depth > 128 then
      error("cannot encode tables nested deeper than 128 levels as JSON", 0)
    end
    seen[v] = true
    local nl, pad, sep = "", "", ","
    if indent then
      nl = "\n" .. s_rep("  ", depth + 1)
      pad = "\n" .. s_rep("  ", depth)
    end
    if is_array(v) then
      local n = #v
      if raw_getmt(v) == array_mt then
        n = 0
        for k in next, v do
          if m_type(k) == "integer" and k > n then
            n = k
          end
        end
      end
      buf[#buf + 1] = "["
      for i = 1, n do
        buf[#buf + 1] = (i > 1 and sep or "") .. nl
        encode_value(v[i], buf, seen, depth + 1, indent)
      end
      buf[#buf + 1] = (n > 0 and pad or "") .. "]"
    else
      local keys, map = {}, {}
      for k in next, v do
        local ks = key_string(k)
        keys[#keys + 1] = ks
        map[ks] = k
      end
      t_sort(keys)
      buf[#buf + 1] = "{"
      for i, ks in ipairs(keys) do
        buf[#buf + 1] = (i > 1 and sep or "") .. nl .. encode_string(ks) .. (indent and ": " or ":")
        encode_value(v[map[ks]], buf, seen, depth + 1, indent)
      end
      buf[#buf + 1] = (#keys > 0 and pad or "") .. "}"
    end
    seen[v] = nil
  else
    error("cannot encode a " .. tv .. " value as JSON", 0)
  end
end

local function encode(v, indent)
  local buf = {}
  encode_value(v, buf, {}, 0, indent)
  return t_concat(buf)
end

local function checked(fname, f, ...)
  local r = t_pack(pcall(f, ...))
  if not r[1] then
    if deadline_passed() then
      error(TIMEOUT_MSG, 0)
    end
    fail(fname .. ": " .. tostring(r[2]))
  end
  return t_unpack(r, 2, r.n)
end

json.encode = function(v)
  return checked("json.encode", encode, v, false)
end
json.encode_pretty = function(v)
  return checked("json.encode_pretty", encode, v, true)
end
json.array = function(t)
  if t == nil then
    t = {}
  end
  if type(t) ~= "table" then
    fail("json.array expects a table")
  end
  return arrayify(t)
end
json.empty_array = function()
  return arrayify({})
end

local function decode(s)
  local pos, len = 1, #s
  local function fail(what)
    error(s_format("%s at position %d", what, pos), 0)
  end
  local function skip()
    pos = s_find(s, "[^ \t\r\n]", pos) or len + 1
  end
  local parse_value
  local function parse_string()
    local buf = {}
    pos = pos + 1
    while true do
      local i = s_find(s, '["\\%c]', pos)
      if not i then
        fail("unterminated string")
      end
      buf[#buf + 1] = s_sub(s, pos, i - 1)
      local c = s_sub(s, i, i)
      if c == '"' then
        pos = i + 1
        return t_concat(buf)
      elseif c == "\\" then
        local e = s_sub(s, i + 1, i + 1)
        local simple = ({['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r",
          t = "\t"})[e]
        if simple then
          buf[#buf + 1] = simple
          pos = i + 2
        elseif e == "u" then
          local hex = s_sub(s, i + 2, i + 5)
          if not s_find(hex, "^%x%x%x%x$") then
            pos = i
            fail("bad \\u escape")
          end
          local cp = tonumber(hex, 16)
          pos = i + 6
          if cp >= 0xD800 and cp <= 0xDBFF and s_sub(s, pos, pos + 1) == "\\u" then
            local lo = tonumber(s_sub(s, pos + 2, pos + 5), 16)
            if lo and lo >= 0xDC00 and lo <= 0xDFFF then
              cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
              pos = pos + 6
            end
          end
          buf[#buf + 1] = utf8_char(cp)
        else
          pos = i
          fail("bad escape")
        end
      else
        pos = i
        fail("control character in string")
      end
    end
  end
  local function parse_number()
    local start = pos
    local i, j = s_find(s, "^-?%d+", pos)
    if not i then
      fail("unexpected character")
    end
    local int = s_sub(s, i, j)
    if s_find(int, "^-?0%d") then
      fail("number with a leading zero")
    end
    pos = j + 1
    local isfloat = false
    i, j = s_find(s, "^%.%d+", pos)
    if i then
      pos, isfloat = j + 1, true
    end
    i, j = s_find(s, "^[eE][-+]?%d+", pos)
    if i then
      pos, isfloat = j + 1, true
    end
    local text = s_sub(s, start, pos - 1)
    local n = tonumber(text)
    if not isfloat then
      n = m_tointeger(n) or tonumber(text .. ".0")
    elseif m_type(n) == "integer" then
      n = n + 0.0
    end
    return n
  end
  local depth = 0
  parse_value = function()
    skip()
    local c = s_sub(s, pos, pos)
    if c == "{" then
      depth = depth + 1
      if depth > 200 then
        fail("nesting deeper than 200 levels")
      end
      pos = pos + 1
      local t = {}
      skip()
      if s_sub(s, pos, pos) == "}" then
        pos = pos + 1
        depth = depth - 1
        return t
      end
      while true do
        skip()
        if s_sub(s, pos, pos) ~= '"' then
          fail("expected a string key")
        end
        local k = parse_string()
        skip()
        if s_sub(s, pos, pos) ~= ":" then
          fail("expected ':'")
        end
        pos = pos + 1
        t[k] = parse_value()
        skip()
        c = s_sub(s, pos, pos)
        pos = pos + 1
        if c == "}" then
          depth = depth - 1
          return t
        elseif c ~= "," then
          pos = pos - 1
          fail("expected ',' or '}'")
        end
      end
    elseif c == "[" then
      depth = depth + 1
      if depth > 200 then
        fail("nesting deeper than 200 levels")
      end
      pos = pos + 1
      local t, n = arrayify({}), 0
      skip()
      if s_sub(s, pos, pos) == "]" then
        pos = pos + 1
        depth = depth - 1
        return t
      end
      while true do
        n = n + 1
        t[n] = parse_value()
        skip()
        c = s_sub(s, pos, pos)
        pos = pos + 1
        if c == "]" then
          depth = depth - 1
          return t
        elseif c ~= "," then
          pos = pos - 1
          fail("expected ',' or ']'")
        end
      end
    elseif c == '"' then
      return parse_string()
    elseif s_sub(s, pos, pos + 3) == "true" then
      pos = pos + 4
      return true
    elseif s_sub(s, pos, pos + 4) == "false" then
      pos = pos + 5
      return false
    elseif s_sub(s, pos, pos + 3) == "null" then
      pos = pos + 4
      return null
    elseif c == "" then
      fail("unexpected end of input")
    end
    return parse_number()
  end
  local v = parse_value()
  skip()
  if pos <= len then
    fail("trailing characters")
  end
  return v
end

json.decode = function(s)
  if type(s) ~= "string" then
    fail("json.decode expects a string, got " .. type(s))
  end
  return checked("json.decode", decode, s)
end

-- 5. text
local text = {}
local function need_string(fname, v, i)
  if type(v) ~= "string" then
    fail(s_format("%s: argument %d must be a string, got %s", fname, i, type(v)))
  end
end
local function is_space(b)
  return b == 32 or (b >= 9 and b <= 13)
end
text.ltrim = function(s)
  need_string("text.ltrim", s, 1)
  local i = s_find(s, "%S")
  return i and s_sub(s, i) or ""
end
text.rtrim = function(s)
  need_string("text.rtrim", s, 1)
  local j = #s
  while j > 0 and is_space(s_byte(s, j)) do
    j = j - 1
  end
  return s_sub(s, 1, j)
end
text.trim = function(s)
  need_string("text.trim", s, 1)
  return text.rtrim(text.ltrim(s))
end
text.split = function(s, sep)
  need_string("text.split", s, 1)
  sep = sep or ","
  need_string("text.split", sep, 2)
  local parts, pos = arrayify({}), 1
  if sep == "" then
    for i = 1, #s do
      parts[i] = s_sub(s, i, i)
    end
    return parts
  end
  while true do
    local i, j = plain_find(s, sep, pos)
    if not i then
      parts[#parts + 1] = s_sub(s, pos)
      return parts
    end
    parts[#parts + 1] = s_sub(s, pos, i - 1)
    pos = j + 1
  end
end
text.lines = function(s)
  need_string("text.lines", s, 1)
  local lines = text.split(s, "\n")
  if lines[#lines] == "" then
    lines[#lines] = nil
  end
  for i, l in ipairs(lines) do
    if s_byte(l, -1) == 13 then
      lines[i] = s_sub(l, 1, -2)
    end
  end
  return lines
end
text.join = function(parts, sep)
  if type(parts) ~= "table" then
    fail("text.join: argument 1 must be a table")
  end
  return t_concat(parts, sep or "")
end
text.startswith = function(s, prefix)
  need_string("text.startswith", s, 1)
  need_string("text.startswith", prefix, 2)
  return s_sub(s, 1, #prefix) == prefix
end
text.endswith = function(s, suffix)
  need_string("text.endswith", s, 1)
  need_string("text.endswith", suffix, 2)
  return suffix == "" or s_sub(s, -#suffix) == suffix
end
text.contains = function(s, sub)
  need_string("text.contains", s, 1)
  need_string("text.contains", sub, 2)
  return plain_find(s, sub, 1) ~= nil
end
text.replace = function(s, old, new, max)
  need_string("text.replace", s, 1)
  need_string("text.replace", old, 2)
  need_string("text.replace", new, 3)
  if old == "" then
    fail("text.replace: the text to replace must not be empty")
  end
  local parts, pos, count = {}, 1, 0
  while not max or count < max do
    local i, j = plain_find(s, old, pos)
    if not i then
      break
    end
    parts[#parts + 1] = s_sub(s, pos, i - 1)
    parts[#parts + 1] = new
    pos, count = j + 1, count + 1
  end
  parts[#parts + 1] = s_sub(s, pos)
  return t_concat(parts), count
end
text.lower = function(s)
  need_string("text.lower", s, 1)
  return s_lower(s)
end
text.upper = function(s)
  need_string("text.upper", s, 1)
  return s_upper(s)
end
text.len = function(s)
  need_string("text.len", s, 1)
  return utf8_len(s) or #s
end

-- 6. Host-backed modules. `call` turns the host's answers into values or errors raised at the script's call site.
local function call(level, op, ...)
  local r = t_pack(host(op, ...))
  if r[1] == true then
    return t_unpack(r, 2, r.n)
  end
  if r[2] == "fail" then
    return nil, r[3]
  end
  raise(r[2], r[3])
end

local time_m = {}
time_m.now = function()
  return call(2, "time.now")
end
time_m.monotonic = function()
  return call(2, "time.monotonic")
end
time_m.elapsed = function()
  return call(2, "time.elapsed")
end
time_m.sleep = function(seconds)
  if type(seconds) ~= "number" or seconds < 0 then
    fail("time.sleep expects a non-negative number of seconds")
  end
  return call(2, "time.sleep", seconds + 0.0)
end
time_m.format = function(t, fmt)
  return os_date(fmt or "!%Y-%m-%dT%H:%M:%SZ", t and m_floor(t) or nil)
end
time_m.iso8601 = function(t)
  return os_date("!%Y-%m-%dT%H:%M:%SZ", t and m_floor(t) or nil)
end

local fs = {}
local function path_arg(fname, p)
  if type(p) ~= "string" or p == "" then
    fail(fname .. ": the path must be a non-empty string")
  end
  return p
end
for _, name in ipairs({"read", "exists", "isdir", "isfile"}) do
  fs[name] = function(p)
    return call(2, "fs." .. name, path_arg("fs." .. name, p))
  end
end
fs.list = function(p)
  local names, err = call(2, "fs.list", path_arg("fs.list", p))
  if names == nil then
    return nil, err
  end
  return arrayify(decode(names))
end
fs.mkdir = function(p)
  return call(2, "fs.mkdir", path_arg("fs.mkdir", p))
end
fs.write = function(p, content)
  path_arg("fs.write", p)
  if type(content) ~= "string" then
    fail("fs.write: the content must be a string (use json.encode for tables)")
  end
  return call(2, "fs.write", p, content)
end
fs.patch = function(p, diff)
  path_arg("fs.patch", p)
  if type(diff) ~= "string" then
    fail("fs.patch: the patch must be a unified diff in a string")
  end
  local r, err = call(2, "fs.patch", p, diff)
  if r == nil then
    return nil, err
  end
  return decode(r)
end

local http = {}
local function http_request(req)
  if type(req) ~= "table" then
    fail("http.request expects a table {method=, url=, headers=, body=, timeout=}")
  end
  local method, url = req.method or "GET", req.url
  if type(method) ~= "string" or type(url) ~= "string" then
    fail("http.request: method and url must be strings")
  end
  local headers = req.headers or {}
  if type(headers) ~= "table" then
    fail("http.request: headers must be a table of strings")
  end
  for k, v in next, headers do
    if type(k) ~= "string" or type(v) ~= "string" then
      fail("http.request: headers must map strings to strings")
    end
  end
  local body = req.body
  if body ~= nil and type(body) ~= "string" then
    fail("http.request: body must be a string (use json.encode for tables)")
  end
  local timeout = req.timeout
  if timeout ~= nil and (type(timeout) ~= "number" or timeout <= 0) then
    fail("http.request: timeout must be a positive number of seconds")
  end
  local status, resp_body, resp_headers = call(3, "http", s_upper(method), url, encode(headers), body,
    timeout and timeout + 0.0)
  if status == nil then
    return nil, resp_body
  end
  return {status = status, ok = status >= 200 and status < 300, body = resp_body, headers = decode(resp_headers)}
end
http.request = function(req)
  return http_request(req)
end
http.get = function(url, opts)
  opts = opts or {}
  return http_request({method = "GET", url = url, headers = opts.headers, timeout = opts.timeout})
end
http.post = function(url, body, opts)
  opts = opts or {}
  return http_request({method = "POST", url = url, body = body, headers = opts.headers, timeout = opts.timeout})
end

local tools = {}
tools.call = function(name, args)
  if type(name) ~= "string" then
    raise("tool_invocation", "tools.call: the tool name must be a string")
  end
  if args ~= nil and type(args) ~= "table" then
    raise("tool_invocation", "tools.call: the arguments must be a table")
  end
  local ok, encoded = pcall(encode, args or {})
  if not ok then
    if deadline_passed() then
      error(TIMEOUT_MSG, 0)
    end
    raise("tool_invocation", "tools.call: the arguments cannot be sent as JSON: " .. tostring(encoded))
  end
  if encoded == "[]" then
    encoded = "{}"
  end
  local status, result_txt, duration, trace_id, err, is_json = call(2, "tools.call", name, encoded)
  -- data: the seed's ToolResult.resultData, the decoded JSON when the result is JSON, else the text
  local data = result_txt
  if is_json then
    local decoded_ok, value = pcall(decode, result_txt)
    if decoded_ok then
      data = value
    elseif deadline_passed() then
      error(TIMEOUT_MSG, 0)
    end
  end
  return {status = status, result_txt = result_txt, data = data, duration = duration, trace_id = trace_id,
          error = err}
end
tools.list = function()
  return arrayify(decode(call(2, "tools.list")))
end
tools.context = function()
  local session_id, conversation_id, turn_id, agent_id = call(2, "tools.context")
  return {session_id = session_id, conversation_id = conversation_id, turn_id = turn_id, agent_id = agent_id}
end

local modules = {json = json, text = text, time = time_m, fs = fs, http = http, tools = tools, string = string,
  table = table, math = math, utf8 = utf8, coroutine = coroutine, os = G.os}
for name, m in pairs({json = json, text = text, time = time_m, fs = fs, http = http, tools = tools}) do
  G[name] = m
end
G.require = function(name)
  if type(name) ~= "string" then
    fail("require expects a module name (a string)")
  end
  local m = modules[name]
  if m then
    return m
  end
  refuse("require(\"" .. name .. "\"): only the built-in modules json, text, time, fs, http, tools (and string, "
    .. "table, math, utf8, coroutine, os) are available; other Lua or C modules cannot be loaded")
end

-- 7. Run the script. A memory error does not call the message handler (Lua 5.4), which tells it apart from a
-- script that raises the same text itself.
local fn, syntax = raw_load(script, "=script", "t", G)
if not fn then
  return false, "runtime", syntax
end
local handled = false
local function handler(e)
  handled = true
  if type(e) == "string" then
    return e
  end
  local mt = raw_getmt(e)
  if mt and rawget(mt, "__tostring") then
    local ok, s = pcall(tostring, e)
    if ok and type(s) == "string" then
      return s
    end
  end
  return "(error object is a " .. type(e) .. " value)"
end

sethook(hook, "", COUNT)
local r = t_pack(xpcall(fn, handler))
if not r[1] then
  local msg = r[2]
  if type(msg) ~= "string" then
    msg = "(error object is a " .. type(msg) .. " value)"
  end
  if timed_out then
    return false, "timeout", TIMEOUT_MSG
  end
  if not handled and msg == "not enough memory" then
    return false, "memory", msg
  end
  for m, kind in next, kinds do
    if s_find(msg, m, 1, true) then
      return false, kind, msg
    end
  end
  return false, "runtime", msg
end
local values = arrayify({t_unpack(r, 2, r.n)})
for i = 1, r.n - 1 do
  if values[i] == nil then
    values[i] = null
  end
end
local ok, encoded = pcall(encode, values)
if not ok then
  if timed_out then
    return false, "timeout", TIMEOUT_MSG
  end
  return false, "runtime", "the script's return values cannot be sent as JSON: " .. tostring(encoded)
end
if #encoded > MAX_OUT then
  return false, "runtime", s_format("the script's return values take %d bytes as JSON, more than the limit of %d",
    #encoded, MAX_OUT)
end
return true, encoded, t_concat(out)
