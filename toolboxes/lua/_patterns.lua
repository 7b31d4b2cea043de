-- string.find/match/gmatch/gsub with a bounded worst case.
--
-- Lua's pattern matcher is C: the time-limit hook cannot fire inside it, and backtracking makes some patterns take
-- hours on a subject of a few kilobytes (`("a"):rep(3000):find(("a*"):rep(20) .. "b")`). Each function below
-- estimates the worst case of the C matcher for its subject and pattern; when it is small the C function runs,
-- otherwise this file's port of lstrlib.c's matcher (Lua 5.4, same semantics and error messages) runs instead, as
-- Lua instructions that the hook counts.
--
-- Loaded by the prelude with an empty environment; receives the functions it needs and `fail(msg)`, which raises
-- an error located at the script's line.
local c_find, c_match, c_gmatch, c_gsub, s_byte, s_sub, s_char, t_concat, type, tostring, tointeger, fail = ...

local function posrelat(pos, len)
  if pos > 0 then
    return pos
  elseif pos == 0 then
    return 1
  elseif pos < -len then
    return 1
  end
  return len + pos + 1
end

-- Worst case of the C matcher, in steps: each of (n + 1) start positions may try every split of the subject
-- between the pattern's q backtracking items (`*`, `+`, `-`, `?`, `%b`), each step costing up to m.
local C_BUDGET = 1e7
local function quantifiers(p)
  local q, i, m = 0, 1, #p
  while i <= m do
    local c = s_byte(p, i)
    if c == 37 then -- '%'
      if s_byte(p, i + 1) == 98 then -- %b
        q = q + 1
      end
      i = i + 2
    elseif c == 91 then -- '[': skip the set
      i = i + 1
      if s_byte(p, i) == 94 then
        i = i + 1
      end
      repeat
        local cc = s_byte(p, i)
        i = i + 1
        if cc == 37 then
          i = i + 1
        end
      until i > m or s_byte(p, i) == 93
      i = i + 1
    else
      if c == 42 or c == 43 or c == 45 or c == 63 then
        q = q + 1
      end
      i = i + 1
    end
  end
  return q
end
local function c_is_safe(s, p, unanchored)
  local n, m = #s + 1, #p + 1
  local starts = (s_byte(p, 1) == 94 and not unanchored) and 1 or n
  return starts * n ^ quantifiers(p) * m <= C_BUDGET
end

-- A plain search is O(#s * #p) in C too: past the budget it runs on windows of the subject, with the hook firing
-- between two windows.
local function plain_find(s, p, init)
  local n, m = #s, #p
  init = posrelat(init, n)
  if init > n + 1 then
    return nil
  end
  if (n - init + 2) * (m + 1) <= C_BUDGET then
    return c_find(s, p, init, true)
  end
  local w = C_BUDGET // (m + 1) // 10 + 1
  local i = init
  while i + m - 1 <= n do
    local a, b = c_find(s_sub(s, i, i + w + m - 2), p, 1, true)
    if a then
      return i + a - 1, i + b - 1
    end
    i = i + w
  end
  return nil
end

-- The port. Positions are 1-based indices into the subject; `src_end` is one past its last byte.
local L_ESC, MAXCAPTURES, MAXCCALLS = 37, 32, 200
local CAP_UNFINISHED, CAP_POSITION = -1, -2
local class_letters = {a = true, c = true, d = true, g = true, l = true, p = true, s = true, u = true, w = true,
  x = true}
local class_sets = {}
local function class_set(lower)
  local t = class_sets[lower]
  if not t then
    t = {}
    local pat = "^%" .. s_char(lower)
    for b = 0, 255 do
      t[b] = c_find(s_char(b), pat) ~= nil
    end
    class_sets[lower] = t
  end
  return t
end

local function match_class(c, cl)
  local lower = cl
  if cl >= 65 and cl <= 90 then
    lower = cl + 32
  end
  if not class_letters[s_char(lower)] then
    return cl == c
  end
  local r = class_set(lower)[c]
  if lower ~= cl then
    return not r
  end
  return r
end

local function class_end(ms, p)
  local pat = ms.p
  local c = s_byte(pat, p)
  p = p + 1
  if c == L_ESC then
    if p >= ms.p_end then
      fail("malformed pattern (ends with '%')")
    end
    return p + 1
  elseif c == 91 then
    if s_byte(pat, p) == 94 then
      p = p + 1
    end
    repeat
      if p >= ms.p_end then
        fail("malformed pattern (missing ']')")
      end
      local cc = s_byte(pat, p)
      p = p + 1
      if cc == L_ESC and p < ms.p_end then
        p = p + 1
      end
    until s_byte(pat, p) == 93
    return p + 1
  end
  return p
end

local function match_bracket_class(ms, c, p, ec)
  local pat = ms.p
  local sig = true
  if s_byte(pat, p + 1) == 94 then
    sig = false
    p = p + 1
  end
  p = p + 1
  while p < ec do
    local pc = s_byte(pat, p)
    if pc == L_ESC then
      p = p + 1
      if match_class(c, s_byte(pat, p)) then
        return sig
      end
    elseif s_byte(pat, p + 1) == 45 and p + 2 < ec then
      p = p + 2
      if pc <= c and c <= s_byte(pat, p) then
        return sig
      end
    elseif pc == c then
      return sig
    end
    p = p + 1
  end
  return not sig
end

local function single_match(ms, s, p, ep)
  if s >= ms.src_end then
    return false
  end
  local c = s_byte(ms.src, s)
  local pc = s_byte(ms.p, p)
  if pc == 46 then
    return true
  elseif pc == L_ESC then
    return match_class(c, s_byte(ms.p, p + 1))
  elseif pc == 91 then
    return match_bracket_class(ms, c, p, ep - 1)
  end
  return pc == c
end

local match

local function match_balance(ms, s, p)
  if p >= ms.p_end - 1 then
    fail("malformed pattern (missing arguments to '%b')")
  end
  local src = ms.src
  if s >= ms.src_end or s_byte(src, s) ~= s_byte(ms.p, p) then
    return nil
  end
  local b, e, cont = s_byte(ms.p, p), s_byte(ms.p, p + 1), 1
  s = s + 1
  while s < ms.src_end do
    local c = s_byte(src, s)
    if c == e then
      cont = cont - 1
      if cont == 0 then
        return s + 1
      end
    elseif c == b then
      cont = cont + 1
    end
    s = s + 1
  end
  return nil
end

local function max_expand(ms, s, p, ep)
  local i = 0
  while single_match(ms, s + i, p, ep) do
    i = i + 1
  end
  while i >= 0 do
    local res = match(ms, s + i, ep + 1)
    if res then
      return res
    end
    i = i - 1
  end
  return nil
end

local function min_expand(ms, s, p, ep)
  while true do
    local res = match(ms, s, ep + 1)
    if res then
      return res
    elseif single_match(ms, s, p, ep) then
      s = s + 1
    else
      return nil
    end
  end
end

local function start_capture(ms, s, p, what)
  local level = ms.level
  if level >= MAXCAPTURES then
    fail("too many captures")
  end
  ms.cap_init[level] = s
  ms.cap_len[level] = what
  ms.level = level + 1
  local res = match(ms, s, p)
  if not res then
    ms.level = ms.level - 1
  end
  return res
end

local function end_capture(ms, s, p)
  local l = -1
  for level = ms.level - 1, 0, -1 do
    if ms.cap_len[level] == CAP_UNFINISHED then
      l = level
      break
    end
  end
  if l < 0 then
    fail("invalid pattern capture")
  end
  ms.cap_len[l] = s - ms.cap_init[l]
  local res = match(ms, s, p)
  if not res then
    ms.cap_len[l] = CAP_UNFINISHED
  end
  return res
end

local function match_capture(ms, s, digit)
  local l = digit - 49
  if l < 0 or l >= ms.level or ms.cap_len[l] == CAP_UNFINISHED then
    fail("invalid capture index %" .. (l + 1))
  end
  local len = ms.cap_len[l]
  local init = ms.cap_init[l]
  if ms.src_end - s >= len and s_sub(ms.src, init, init + len - 1) == s_sub(ms.src, s, s + len - 1) then
    return s + len
  end
  return nil
end

match = function(ms, s, p)
  ms.depth = ms.depth - 1
  if ms.depth < 0 then
    fail("pattern too complex")
  end
  local pat = ms.p
  while true do
    if p == ms.p_end then
      break
    end
    local pc = s_byte(pat, p)
    if pc == 40 then -- '('
      if s_byte(pat, p + 1) == 41 then
        s = start_capture(ms, s, p + 2, CAP_POSITION)
      else
        s = start_capture(ms, s, p + 1, CAP_UNFINISHED)
      end
      break
    elseif pc == 41 then -- ')'
      s = end_capture(ms, s, p + 1)
      break
    elseif pc == 36 and p + 1 == ms.p_end then -- '$' at the end
      if s ~= ms.src_end then
        s = nil
      end
      break
    end
    local nx = pc == L_ESC and s_byte(pat, p + 1) or nil
    if nx == 98 then -- %b
      s = match_balance(ms, s, p + 2)
      if not s then
        break
      end
      p = p + 4
    elseif nx == 102 then -- %f
      p = p + 2
      if s_byte(pat, p) ~= 91 then
        fail("missing '[' after '%f' in pattern")
      end
      local ep = class_end(ms, p)
      local previous = s == 1 and 0 or s_byte(ms.src, s - 1)
      local current = s_byte(ms.src, s) or 0
      if not match_bracket_class(ms, previous, p, ep - 1) and match_bracket_class(ms, current, p, ep - 1) then
        p = ep
      else
        s = nil
        break
      end
    elseif nx and nx >= 48 and nx <= 57 then -- %0-%9
      s = match_capture(ms, s, nx)
      if not s then
        break
      end
      p = p + 2
    else
      local ep = class_end(ms, p)
      local epc = s_byte(pat, ep)
      if not single_match(ms, s, p, ep) then
        if epc == 42 or epc == 63 or epc == 45 then -- '*', '?', '-': zero occurrences
          p = ep + 1
        else
          s = nil
          break
        end
      elseif epc == 63 then -- '?'
        local res = match(ms, s + 1, ep + 1)
        if res then
          s = res
          break
        end
        p = ep + 1
      elseif epc == 43 then -- '+'
        s = max_expand(ms, s + 1, p, ep)
        break
      elseif epc == 42 then -- '*'
        s = max_expand(ms, s, p, ep)
        break
      elseif epc == 45 then -- '-'
        s = min_expand(ms, s, p, ep)
        break
      else
        s = s + 1
        p = ep
      end
    end
  end
  ms.depth = ms.depth + 1
  return s
end

local function new_state(s, p, pstart)
  return {src = s, src_end = #s + 1, p = p, p_end = #p + 1, pstart = pstart, level = 0, cap_init = {},
    cap_len = {}, depth = MAXCCALLS}
end
local function reset(ms)
  ms.level = 0
  ms.depth = MAXCCALLS
end

local function one_capture(ms, i, s, e)
  if i >= ms.level then
    if i ~= 0 then
      fail("invalid capture index %" .. (i + 1))
    end
    return s_sub(ms.src, s, e - 1)
  end
  local l = ms.cap_len[i]
  if l == CAP_UNFINISHED then
    fail("unfinished capture")
  elseif l == CAP_POSITION then
    return ms.cap_init[i]
  end
  local init = ms.cap_init[i]
  return s_sub(ms.src, init, init + l - 1)
end

local function captures(ms, s, e, whole)
  local n = (ms.level == 0 and whole) and 1 or ms.level
  local out = {}
  for i = 0, n - 1 do
    out[i + 1] = one_capture(ms, i, s, e)
  end
  return out, n
end

local function unpack_n(t, i, n)
  if i > n then
    return
  end
  return t[i], unpack_n(t, i + 1, n)
end

local function check_string(fname, i, v)
  local tv = type(v)
  if tv == "number" then
    return tostring(v)
  elseif tv ~= "string" then
    fail("bad argument #" .. i .. " to '" .. fname .. "' (string expected, got " .. (v == nil and "no value" or tv)
      .. ")")
  end
  return v
end

local function check_int(fname, i, v, default)
  if v == nil then
    return default
  end
  local n = tointeger(v)
  if not n then
    fail("bad argument #" .. i .. " to '" .. fname .. "' (number has no integer representation)")
  end
  return n
end

local function find_aux(find, s, p, init)
  local ls = #s
  init = posrelat(init, ls)
  if init > ls + 1 then
    return nil
  end
  local anchor = s_byte(p, 1) == 94
  local ms = new_state(s, p, anchor and 2 or 1)
  local s1 = init
  repeat
    reset(ms)
    local e = match(ms, s1, ms.pstart)
    if e then
      if find then
        local caps, n = captures(ms, nil, nil, false)
        return s1, e - 1, unpack_n(caps, 1, n)
      end
      local caps, n = captures(ms, s1, e, true)
      return unpack_n(caps, 1, n)
    end
    s1 = s1 + 1
  until s1 > ms.src_end or anchor
  return nil
end

local lib = {}

lib.find = function(s, p, init, plain)
  s, p = check_string("find", 1, s), check_string("find", 2, p)
  init = check_int("find", 3, init, 1)
  if plain or not c_find(p, "[%^%$%*%+%?%.%(%)%[%]%%%-]") then
    return plain_find(s, p, init)
  elseif c_is_safe(s, p) then
    return c_find(s, p, init)
  end
  return find_aux(true, s, p, init)
end

lib.match = function(s, p, init)
  s, p = check_string("match", 1, s), check_string("match", 2, p)
  init = check_int("match", 3, init, 1)
  if c_is_safe(s, p) then
    return c_match(s, p, init)
  end
  return find_aux(false, s, p, init)
end

lib.gmatch = function(s, p, init)
  s, p = check_string("gmatch", 1, s), check_string("gmatch", 2, p)
  init = check_int("gmatch", 3, init, 1)
  if c_is_safe(s, p, true) then
    return c_gmatch(s, p, init)
  end
  local ls = #s
  init = posrelat(init, ls)
  if init > ls + 1 then
    init = ls + 2
  end
  local ms = new_state(s, p, 1)
  local src, lastmatch = init, nil
  return function()
    while src <= ms.src_end do
      reset(ms)
      local e = match(ms, src, 1)
      if e and e ~= lastmatch then
        local start = src
        src, lastmatch = e, e
        local caps, n = captures(ms, start, e, true)
        return unpack_n(caps, 1, n)
      end
      src = src + 1
    end
    return nil
  end
end

local function add_value(ms, b, s, e, repl, tr)
  local value
  if tr == "function" then
    local caps, n = captures(ms, s, e, true)
    value = repl(unpack_n(caps, 1, n))
  elseif tr == "table" then
    value = repl[one_capture(ms, 0, s, e)]
  else
    local parts, i, len = {}, 1, #repl
    while i <= len do
      local j = c_find(repl, "%", i, true)
      if not j then
        parts[#parts + 1] = s_sub(repl, i)
        break
      end
      parts[#parts + 1] = s_sub(repl, i, j - 1)
      local d = s_byte(repl, j + 1)
      if d == L_ESC then
        parts[#parts + 1] = "%"
      elseif d == 48 then
        parts[#parts + 1] = s_sub(ms.src, s, e - 1)
      elseif d and d >= 49 and d <= 57 then
        parts[#parts + 1] = tostring(one_capture(ms, d - 49, s, e))
      else
        fail("invalid use of '%' in replacement string")
      end
      i = j + 2
    end
    b[#b + 1] = t_concat(parts)
    return
  end
  if not value then
    b[#b + 1] = s_sub(ms.src, s, e - 1)
  elseif type(value) == "string" or type(value) == "number" then
    b[#b + 1] = tostring(value)
  else
    fail("invalid replacement value (a " .. type(value) .. ")")
  end
end

lib.gsub = function(s, p, repl, max_n)
  s, p = check_string("gsub", 1, s), check_string("gsub", 2, p)
  local tr = type(repl)
  if tr == "number" then
    repl, tr = tostring(repl), "string"
  end
  if tr ~= "string" and tr ~= "table" and tr ~= "function" then
    fail("bad argument #3 to 'gsub' (string/function/table expected, got " .. (repl == nil and "no value" or tr)
      .. ")")
  end
  max_n = check_int("gsub", 4, max_n, #s + 1)
  if c_is_safe(s, p) then
    return c_gsub(s, p, repl, max_n)
  end
  local anchor = s_byte(p, 1) == 94
  local ms = new_state(s, p, anchor and 2 or 1)
  local b, src, copied, lastmatch, n = {}, 1, 1, nil, 0
  while n < max_n do
    reset(ms)
    local e = match(ms, src, ms.pstart)
    if e and e ~= lastmatch then
      n = n + 1
      b[#b + 1] = s_sub(s, copied, src - 1)
      add_value(ms, b, src, e, repl, tr)
      src, lastmatch, copied = e, e, e
    elseif src < ms.src_end then
      src = src + 1
    else
      break
    end
    if anchor then
      break
    end
  end
  b[#b + 1] = s_sub(s, copied)
  return t_concat(b), n
end

lib.plain_find = plain_find
return lib
