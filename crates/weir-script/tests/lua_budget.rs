//! The instruction budget over Lua's own C functions: pathological patterns and big
//! subjects, `string.rep` in a loop, `table.concat`, `string.byte` and the like are charged
//! by the work they are asked and stopped as budget overruns (quickly); the pattern
//! functions, matched by weir, give what Lua's give.

use std::time::{Duration, Instant};

use weir_script::lua::{
    CallError, CallResult, FlowId, LuaConfig, PacketView, Runtime, BYTES_PER_INSTRUCTION,
};

fn runtime_with(cfg: &LuaConfig, code: &str) -> Runtime {
    let mut rt = Runtime::new(cfg).unwrap();
    rt.load("t.lua", code).unwrap();
    rt
}

fn call(rt: &mut Runtime, f: &str) -> CallResult {
    let f = rt.function(f).unwrap();
    rt.call(f, &mut PacketView::new(Vec::new(), true), FlowId(1), &[])
}

/// Calls `f`: it must end as a budget overrun, within `within`.
fn overruns(rt: &mut Runtime, f: &str, within: Duration) {
    let t = Instant::now();
    let r = call(rt, f);
    let took = t.elapsed();
    assert_eq!(r.error, Some(CallError::Budget), "{f}: {:?}", r.error);
    assert!(took < within, "{f} took {took:?}");
    let st = rt.stats().into_iter().find(|(n, _)| n == f).unwrap().1;
    assert_eq!(
        (st.budget_exceeded, st.errors, st.memory_exceeded),
        (1, 0, 0),
        "{f}"
    );
}

const SLOW: &str = r#"
function find_pathological()
  return string.rep('a', 1e6):find(('.-'):rep(20) .. 'x')
end
function match_pathological() return string.rep('a', 5000):match('(.-)(.-)(.-)b') end
function gsub_pathological() return (string.rep('a', 5000):gsub('.-.-.-b', '')) end
function gmatch_pathological()
  for x in string.rep('a', 5000):gmatch('a*a*a*b') do end
end
function find_pcall()
  -- the overrun is not caught
  while true do pcall(string.find, string.rep('a', 1e5), '.-.-.-x') end
end
function rep_loop()
  for i = 1, 1e9 do local s = string.rep('a', 1e5) end
end
function rep_huge() return #string.rep('ab', 1e12) end
function concat_range() return table.concat({}, '', 1, 1e12) end
function concat_big()
  local t = {}
  local s = string.rep('x', 60000)
  for i = 1, 1000 do t[i] = s end
  for i = 1, 1e9 do local r = table.concat(t) end
end
function byte_all() return string.byte(string.rep('a', 1e6), 1, -1) end
function format_loop()
  local s = string.rep('q', 1e5)
  for i = 1, 1e9 do local r = string.format('%s%s%q', s, s, s) end
end
function sub_loop()
  local s = string.rep('s', 1e6)
  for i = 1, 1e9 do local r = s:sub(2) end
end
function unpack_many() return select('#', table.unpack({}, 1, 1e7)) end
"#;

#[test]
fn pathological_patterns_and_big_outputs_overrun_the_budget() {
    let mut rt = runtime_with(&LuaConfig::default(), SLOW);
    // debug builds: generous, but far from the hours (or the memory limit) these ask for
    let within = Duration::from_secs(10);
    for f in [
        "find_pathological",
        "match_pathological",
        "gsub_pathological",
        "gmatch_pathological",
        "find_pcall",
        "rep_loop",
        "rep_huge",
        "concat_range",
        "concat_big",
        "byte_all",
        "format_loop",
        "sub_loop",
        "unpack_many",
    ] {
        overruns(&mut rt, f, within);
    }
    // and the runtime goes on
    let mut rt2 = runtime_with(&LuaConfig::default(), "function ok() return 'pass' end");
    assert_eq!(call(&mut rt2, "ok").error, None);
}

#[test]
fn table_shifts_are_charged() {
    let mut rt = runtime_with(
        &LuaConfig::default(),
        r#"
        function fill() t = {} for i = 1, 100000 do t[i] = i end end
        function shift() for i = 1, 1e9 do table.insert(t, 1, table.remove(t, 1)) end end
        function sort() for i = 1, 1e9 do table.sort(t) end end
        "#,
    );
    // (100000 loop iterations: within the default budget)
    let r = call(&mut rt, "fill");
    assert_eq!(r.error, None);
    overruns(&mut rt, "shift", Duration::from_secs(10));
    overruns(&mut rt, "sort", Duration::from_secs(10));
}

/// A call's cost is in proportion to what it asks: `string.rep` of `n` bytes costs about
/// `n / BYTES_PER_INSTRUCTION` instructions, so a budget lets a known number through.
#[test]
fn rep_is_charged_by_its_size() {
    let cfg = LuaConfig {
        instruction_budget: 1_000_000,
        ..LuaConfig::default()
    };
    let mut rt = runtime_with(
        &cfg,
        r#"
        n = 0
        function reps() n = 0 while true do local s = string.rep('a', 16000) n = n + 1 end end
        function count(pkt) pkt:send(tostring(n)) end
        "#,
    );
    overruns(&mut rt, "reps", Duration::from_secs(10));
    let r = call(&mut rt, "count");
    let n: u64 = String::from_utf8(r.send[0].clone())
        .unwrap()
        .parse()
        .unwrap();
    let each = 16000 / BYTES_PER_INSTRUCTION + 1;
    let most = 1_000_000 / each;
    // (the loop's own instructions take a few percent)
    assert!(
        (most * 9 / 10..=most).contains(&n),
        "{n} reps, at most {most}"
    );
}

/// Patterns, subjects and starts tried against Lua's own functions (a plain Lua state).
const SAME: &str = r#"
local subjects = {"hello world", "", "aaa", "  key = value  ", "THE (quick) fox",
  "f(a(b)c)d", "x=1, y=22, z=333", "\0a\0b", "the_end$", "[[]]", "hello.world",
  "caf\195\169 na\195\175ve", "a,b,,c", "abcabcabc", "THE END"}
local patterns = {"o", "l+", "l*", "l-", "l?", "^h", "d$", "%a+", "%d+", "(%w+)=(%w+)",
  "()ll()", "%bxy", "%b()", "%f[%w]%w+", "[%a_][%w_]*", "[^%s]+", ".-", "(.)%1",
  "^(%s*)(.-)(%s*)$", "[a-f]+", "[]]", "[^]]", "%", "[a", "(()", "%1", "a)", "%g+", "%p",
  "%c", "%x+", "%u+", "%l+", "%S+", "$", "^", "", "%f[%a]", ".", "a*$", "[%]]", "%$",
  "(a)(b)(c)", "((a)b)", "[^,]*", "%.", "[%w.]+", "%f[%z]", "[\128-\255]+", "^(.-),",
  "%b", "%f", "(%a+) (%a+)", "e?n?d?$", "[a-]", "[-a]", "%w-d", "()", "x*", "%S-%s"}
local inits = {false, 1, 3, -2, 0, 100, -100}
local function ser(...)
  local out = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    out[#out + 1] = type(v) .. ':' .. tostring(v)
  end
  return table.concat(out, ',')
end
local function try(f, ...)
  local r = table.pack(pcall(f, ...))
  if not r[1] then return 'error' end
  return ser(table.unpack(r, 2, r.n))
end
local function all(s, p, init)
  local out, n = {}, 0
  local ok, e = pcall(function()
    for a, b, c in string.gmatch(s, p, init) do
      n = n + 1
      out[#out + 1] = ser(a, b, c)
      if n > 50 then break end
    end
  end)
  if not ok then return 'error' end
  return table.concat(out, ';')
end
local repls = {"<%0|%1>", "%%", "[%2]", "x", 7, {hello = "HI", a = false, o = 0},
  function(a, b) if a == 'l' then return nil end return (b or a or '') .. '!' end}
function run()
  local res = {}
  for si, s in ipairs(subjects) do
    for pi, p in ipairs(patterns) do
      local tag = si .. '/' .. pi .. ' '
      for _, init in ipairs(inits) do
        init = init or nil
        res[#res + 1] = tag .. 'find ' .. try(string.find, s, p, init)
        res[#res + 1] = tag .. 'plain ' .. try(string.find, s, p, init, true)
        res[#res + 1] = tag .. 'match ' .. try(string.match, s, p, init)
        res[#res + 1] = tag .. 'gmatch ' .. all(s, p, init)
      end
      for ri, r in ipairs(repls) do
        res[#res + 1] = tag .. 'gsub' .. ri .. ' ' .. try(string.gsub, s, p, r)
        res[#res + 1] = tag .. 'gsub1 ' .. ri .. ' ' .. try(string.gsub, s, p, r, 1)
      end
    end
  end
  res[#res + 1] = 'num ' .. try(string.find, 12345, 34) .. try(string.gsub, 1.5, '%.', ',')
  res[#res + 1] = 'meth ' .. try(function() return ('k=v'):match('(%w)=(%w)') end)
  res[#res + 1] = 'bad ' .. try(string.find, nil, 'x') .. try(string.gsub, 's', 's', true)
  res[#res + 1] = 'repl ' .. try(string.gsub, 'abc', 'b', '%9') .. try(string.gsub, 'abc', 'b', '%')
  return table.concat(res, '\n')
end
"#;

#[test]
fn pattern_functions_give_what_luas_give() {
    let lua = mlua::Lua::new();
    lua.load(SAME).exec().unwrap();
    let want: mlua::String = lua
        .globals()
        .get::<mlua::Function>("run")
        .unwrap()
        .call(())
        .unwrap();
    let want = want.as_bytes().to_vec();

    let cfg = LuaConfig {
        instruction_budget: u32::MAX,
        ..LuaConfig::default()
    };
    // (in pieces: a call sends at most MAX_SEND packets of at most MAX_PACKET bytes)
    let code = format!(
        "{SAME}\nfunction t(pkt) local s = run() \
         for i = 1, #s, 60000 do pkt:send(s:sub(i, i + 59999)) end end"
    );
    let mut rt = runtime_with(&cfg, &code);
    let r = call(&mut rt, "t");
    assert_eq!(r.error, None);
    let got = r.send.concat();
    let w: Vec<&[u8]> = want.split(|&c| c == b'\n').collect();
    let g: Vec<&[u8]> = got.split(|&c| c == b'\n').collect();
    assert!(w.len() > 20_000, "{} cases", w.len());
    for (a, b) in w.iter().zip(&g) {
        assert_eq!(String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    }
    assert_eq!(w.len(), g.len());
}

/// Lua functions called from the wrapped ones (a `gsub` replacement, a `sort` comparator,
/// inside a coroutine too) are counted as they run.
#[test]
fn lua_called_back_from_wrapped_functions_is_counted() {
    let mut rt = runtime_with(
        &LuaConfig::default(),
        r#"
        function gsub_fn() return ('abc'):gsub('.', function() while true do end end) end
        function sort_cmp()
          local t = {3, 2, 1}
          table.sort(t, function(a, b) while true do end end)
        end
        function in_coroutine()
          local co = coroutine.wrap(function()
            return ('abc'):gsub('.', function() while true do end end)
          end)
          co()
        end
        function rep_empty() return string.rep('', 1e15) end
        "#,
    );
    for f in ["gsub_fn", "sort_cmp", "in_coroutine", "rep_empty"] {
        overruns(&mut rt, f, Duration::from_secs(10));
    }
}

/// What the charging costs: loops of common string calls in the sandbox against a plain
/// Lua state (`cargo test --release -p weir-script --test lua_budget -- --ignored
/// --nocapture cost`).
#[test]
#[ignore]
fn cost() {
    const N: u32 = 1_000_000;
    let cases = [
        ("s:sub(2, 5)", "local r = s:sub(2, 5)"),
        ("s:byte(3)", "local r = s:byte(3)"),
        (
            "s:find('Host', 1, true)",
            "local r = s:find('Host', 1, true)",
        ),
        (
            "s:find('Host: ([^\\r]+)')",
            "local r = s:find('Host: ([^\\r]+)')",
        ),
        ("s:match('%d+')", "local r = s:match('%d+')"),
        ("s:gsub('o', '0')", "local r = s:gsub('o', '0')"),
        ("('%d'):format(i)", "local r = ('%d'):format(i)"),
        ("table.concat(t)", "local r = table.concat(t)"),
        ("nothing", "local r = i"),
        ("s:len() (not wrapped)", "local r = s:len()"),
        (
            "timer_info('x') (a Rust call)",
            "local r = timer_info and timer_info('x')",
        ),
    ];
    for (name, body) in cases {
        let code = format!(
            "function f() local s = 'GET / HTTP/1.1\\r\\nHost: example.com\\r\\nUser-Agent: x 123\\r\\n\\r\\n' \
             local t = {{'a', 'b', 'c'}} for i = 1, {N} do {body} end end"
        );
        let lua = mlua::Lua::new();
        lua.load(&code).exec().unwrap();
        let f: mlua::Function = lua.globals().get("f").unwrap();
        let t = Instant::now();
        f.call::<()>(()).unwrap();
        let plain = t.elapsed();
        let cfg = LuaConfig {
            instruction_budget: u32::MAX,
            ..LuaConfig::default()
        };
        let mut rt = runtime_with(&cfg, &code);
        let t = Instant::now();
        assert_eq!(call(&mut rt, "f").error, None);
        let ours = t.elapsed();
        let ns = |d: Duration| d.as_nanos() as f64 / N as f64;
        println!(
            "{name:28} plain Lua {:7.1} ns/iteration, sandboxed {:7.1}",
            ns(plain),
            ns(ours)
        );
    }
}
