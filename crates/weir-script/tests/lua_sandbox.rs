//! The Lua sandbox and limits: the instruction budget, the memory limit, errors, and what
//! a script cannot reach (processes, debug, C modules, files outside the directory, binary
//! chunks).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use weir_script::lua::{CallError, FlowId, FnStats, LuaConfig, PacketView, Runtime, Verdict};
use weir_wire::build::Builder;

fn pkt() -> PacketView {
    PacketView::new(
        Builder::raw().udp(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            1,
            2,
            b"p",
        ),
        true,
    )
}

fn rt_with(cfg: &LuaConfig, code: &str) -> Runtime {
    let mut rt = Runtime::new(cfg).unwrap();
    rt.load("t.lua", code).unwrap();
    rt
}

fn rt(code: &str) -> Runtime {
    rt_with(&LuaConfig::default(), code)
}

/// Calls `name` and returns the one packet it sent, as a string.
fn sent(rt: &mut Runtime, name: &str) -> String {
    let f = rt.function(name).unwrap();
    let r = rt.call(f, &mut pkt(), FlowId(1), &[]);
    assert_eq!(r.error, None);
    assert_eq!(r.send.len(), 1);
    String::from_utf8(r.send[0].clone()).unwrap()
}

fn stats_of(rt: &Runtime, name: &str) -> FnStats {
    rt.stats().into_iter().find(|(n, _)| n == name).unwrap().1
}

const LOOPS: &str = r#"
function spin(pkt) while true do end end
function spin_pcall(pkt) while true do pcall(function() while true do end end) end end
function spin_xpcall(pkt) while true do xpcall(function() while true do end end, function(e) return e end) end end
function spin_wrap(pkt) coroutine.wrap(function() while true do end end)() end
function spin_resume(pkt)
  local co = coroutine.create(function() while true do coroutine.yield() end end)
  while true do coroutine.resume(co) end
end
function spin_close(pkt)
  local co = coroutine.create(function()
    local x <close> = setmetatable({}, { __close = function() while true do end end })
    coroutine.yield()
  end)
  coroutine.resume(co)
  coroutine.close(co)
end
function ok(pkt) return "drop" end
"#;

#[test]
fn infinite_loops_hit_the_budget_and_the_next_call_works() {
    let mut rt = rt(LOOPS);
    let ok = rt.function("ok").unwrap();
    for name in [
        "spin",
        "spin_pcall",
        "spin_xpcall",
        "spin_wrap",
        "spin_resume",
        "spin_close",
        "spin",
    ] {
        let f = rt.function(name).unwrap();
        let mut p = pkt();
        let before = p.clone();
        let r = rt.call(f, &mut p, FlowId(1), &[]);
        assert_eq!(
            (name, r.verdict, r.error),
            (name, Verdict::Pass, Some(CallError::Budget))
        );
        assert_eq!(p, before);
        let r = rt.call(ok, &mut pkt(), FlowId(1), &[]);
        assert_eq!((name, r.verdict, r.error), (name, Verdict::Drop, None));
    }
    assert_eq!(
        stats_of(&rt, "spin"),
        FnStats {
            calls: 2,
            errors: 0,
            budget_exceeded: 2,
            memory_exceeded: 0
        }
    );
    assert_eq!(stats_of(&rt, "spin_resume").budget_exceeded, 1);
    assert_eq!(stats_of(&rt, "ok").calls, 7);
}

#[test]
fn the_budget_is_per_call() {
    // Two instructions an iteration (ADDI, FORLOOP): 300,000 iterations fit in 1,000,000
    // per call, 600,000 do not.
    let mut rt = rt("function f(pkt, a) local n = 0 for i = 1, tonumber(a.n) do n = n + 1 end end");
    let f = rt.function("f").unwrap();
    let small = vec![("n".to_string(), "300000".to_string())];
    let big = vec![("n".to_string(), "600000".to_string())];
    for _ in 0..5 {
        assert_eq!(rt.call(f, &mut pkt(), FlowId(1), &small).error, None);
    }
    assert_eq!(
        rt.call(f, &mut pkt(), FlowId(1), &big).error,
        Some(CallError::Budget)
    );
}

const BOMBS: &str = r#"
function bomb(pkt)
  local t = {}
  while true do t[#t + 1] = string.rep("x", 4096) .. #t end
end
function bomb_pcall(pkt)
  while true do
    pcall(function() local t = {} while true do t[#t + 1] = string.rep("y", 4096) .. #t end end)
  end
end
function bomb_rep(pkt) return string.rep("z", 1 << 30) end
function ok(pkt) local s = string.rep("k", 1000) pkt:send(#s .. "") end
"#;

#[test]
fn allocation_bombs_hit_the_memory_limit_and_the_next_call_works() {
    let cfg = LuaConfig {
        memory_limit: 16 << 20,
        instruction_budget: 100_000_000,
        ..LuaConfig::default()
    };
    let mut rt = rt_with(&cfg, BOMBS);
    for name in ["bomb", "bomb_pcall", "bomb_rep", "bomb"] {
        let f = rt.function(name).unwrap();
        let r = rt.call(f, &mut pkt(), FlowId(1), &[]);
        assert_eq!(
            (name, r.verdict, r.error),
            (name, Verdict::Pass, Some(CallError::Memory))
        );
        assert!(
            rt.memory_used() < 4 << 20,
            "{} after {name}",
            rt.memory_used()
        );
        assert_eq!(sent(&mut rt, "ok"), "1000");
    }
    assert_eq!(
        stats_of(&rt, "bomb"),
        FnStats {
            calls: 2,
            errors: 0,
            budget_exceeded: 0,
            memory_exceeded: 2
        }
    );
    assert_eq!(stats_of(&rt, "bomb_pcall").memory_exceeded, 1);
    assert_eq!(stats_of(&rt, "bomb_rep").memory_exceeded, 1);
}

#[test]
fn errors_are_counted() {
    let mut rt = rt("function f(pkt)\n  error('x')\nend\nfunction g(pkt) return pkt.nope.x end\nfunction h(pkt) pkt:set_byte(1000, 1) end\n");
    let f = rt.function("f").unwrap();
    for _ in 0..2 {
        let r = rt.call(f, &mut pkt(), FlowId(1), &[]);
        assert_eq!(r.error, Some(CallError::Script("t.lua:2: x".into())));
        assert_eq!(r.verdict, Verdict::Pass);
    }
    let g = rt.function("g").unwrap();
    let r = rt.call(g, &mut pkt(), FlowId(1), &[]);
    assert_eq!(
        r.error,
        Some(CallError::Script(
            "t.lua:4: attempt to index a nil value (field 'nope')".into()
        ))
    );
    let h = rt.function("h").unwrap();
    let r = rt.call(h, &mut pkt(), FlowId(1), &[]);
    assert_eq!(
        r.error,
        Some(CallError::Script(
            "set_byte: position 1000 outside 1..29".into()
        ))
    );
    assert_eq!(
        rt.stats(),
        vec![
            (
                "f".to_string(),
                FnStats {
                    calls: 2,
                    errors: 2,
                    budget_exceeded: 0,
                    memory_exceeded: 0
                }
            ),
            (
                "g".to_string(),
                FnStats {
                    calls: 1,
                    errors: 1,
                    budget_exceeded: 0,
                    memory_exceeded: 0
                }
            ),
            (
                "h".to_string(),
                FnStats {
                    calls: 1,
                    errors: 1,
                    budget_exceeded: 0,
                    memory_exceeded: 0
                }
            ),
        ]
    );
}

#[test]
fn dangerous_functions_are_absent() {
    let mut rt = rt(r#"
    function f(pkt)
      local t = { type(io.popen), type(os.execute), type(os.exit), type(os.remove),
        type(os.rename), type(os.tmpname), type(debug), type(package), type(require),
        type(string.dump), type(print), type(io.write), type(io.lines), type(io.read),
        type(io.output), type(io.stdout), type(loadstring),
        type(os.time), type(os.clock), type(os.date), type(os.getenv), type(io.open),
        type(string.rep), type(table.concat), type(math.floor), type(utf8.char),
        type(coroutine.create), math.type(VERDICT_DROP), tostring(VERDICT_DROP) }
      pkt:send(table.concat(t, " "))
    end
    function gc(pkt) collectgarbage("stop") end
    function gc_count(pkt) pkt:send(math.type(collectgarbage("count"))) end
    "#);
    assert_eq!(
        sent(&mut rt, "f"),
        "nil nil nil nil nil nil nil nil nil nil nil nil nil nil nil nil nil \
         function function function function function function function function function \
         function integer 2"
    );
    let gc = rt.function("gc").unwrap();
    let r = rt.call(gc, &mut pkt(), FlowId(1), &[]);
    assert_eq!(
        r.error,
        Some(CallError::Script(
            "t.lua:12: collectgarbage: option 'stop' not allowed".into()
        ))
    );
    assert_eq!(sent(&mut rt, "gc_count"), "float");
}

#[test]
fn binary_chunks_refused_text_chunks_load() {
    let mut rt = rt(r#"
    function f(pkt)
      local f1, e1 = load("\27Lua\84\0\25\147\13\10\26\10\4\8\8")
      local f2, e2 = load("return 1 + 1", "c", "b")
      local f3 = load("return x", "c", "t", { x = 5 })
      local f4, e4 = load(function() local s = "\27Lua" local d = false return (function() if d then return nil end d = true return s end)() end)
      pkt:send(table.concat({ tostring(f1), e1, tostring(f2()), tostring(f3()), tostring(f4), e4 }, "|"))
    end
    "#);
    assert_eq!(
        sent(&mut rt, "f"),
        "nil|attempt to load a binary chunk (mode is 't')|2|5|nil|attempt to load a binary chunk (mode is 't')"
    );
}

/// A fresh directory with `data.txt` and `lib.lua` inside and `outside.txt` beside it, and
/// a link inside pointing at the outside file.
fn scratch(name: &str) -> (PathBuf, PathBuf) {
    let base = std::env::temp_dir().join(format!("weir-lua-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dir = base.join("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("data.txt"), "inside\n").unwrap();
    std::fs::write(dir.join("lib.lua"), "return { answer = 42 }\n").unwrap();
    std::fs::write(base.join("outside.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(base.join("outside.txt"), dir.join("link.txt")).unwrap();
    (base, dir)
}

const FILES: &str = r#"
function try(path, mode)
  local f, e = io.open(path, mode)
  if not f then return "refused: " .. tostring(e) end
  local s = f:read("a")
  f:close()
  return "read: " .. s
end
function files(pkt, a)
  pkt:send(table.concat({
    try("data.txt"),
    try(a.dir .. "/data.txt", "rb"),
    try(a.dir .. "/../outside.txt"),
    try("../outside.txt"),
    try("link.txt"),
    try("data.txt", "w"),
    try("data.txt", "r+"),
    try("new.txt", "a"),
    tostring(dofile("lib.lua").answer),
    tostring(select(2, loadfile("../outside.txt")) ~= nil),
    tostring(pcall(dofile, "/etc/hostname")),
  }, "|"))
end
"#;

#[test]
fn io_open_only_reads_under_dir() {
    let (base, dir) = scratch("io");
    let cfg = LuaConfig {
        dir: Some(dir.clone()),
        ..LuaConfig::default()
    };
    let mut rt = rt_with(&cfg, FILES);
    let f = rt.function("files").unwrap();
    let args = vec![("dir".to_string(), dir.display().to_string())];
    let r = rt.call(f, &mut pkt(), FlowId(1), &args);
    assert_eq!(r.error, None);
    let got = String::from_utf8(r.send[0].clone()).unwrap();
    let parts: Vec<&str> = got.split('|').collect();
    assert_eq!(parts[0], "read: inside\n");
    assert_eq!(parts[1], "read: inside\n");
    assert_eq!(
        parts[2],
        format!(
            "refused: {}/../outside.txt: outside the script directory",
            dir.display()
        )
    );
    assert_eq!(
        parts[3],
        "refused: ../outside.txt: outside the script directory"
    );
    assert_eq!(parts[4], "refused: link.txt: outside the script directory");
    assert_eq!(
        parts[5],
        "refused: data.txt: only reading (mode \"r\") allowed"
    );
    assert_eq!(
        parts[6],
        "refused: data.txt: only reading (mode \"r\") allowed"
    );
    assert_eq!(
        parts[7],
        "refused: new.txt: only reading (mode \"r\") allowed"
    );
    assert_eq!(parts[8], "42");
    assert_eq!(parts[9], "true");
    assert_eq!(parts[10], "false");
    assert_eq!(parts.len(), 11);
    // At most 8 files a call (paths that resolve under the directory; dofile and loadfile
    // count too): the 9th and 10th are refused.
    rt.load(
        "t3.lua",
        "function opens(pkt) local t = {} for i = 1, 10 do t[i] = try('data.txt') end pkt:send(table.concat(t, '|')) end",
    )
    .unwrap();
    let o = rt.function("opens").unwrap();
    let r = rt.call(o, &mut pkt(), FlowId(1), &[]);
    let got = String::from_utf8(r.send[0].clone()).unwrap();
    let want = ["read: inside\n"; 8].join("|")
        + "|refused: data.txt: at most 8 files per call|refused: data.txt: at most 8 files per call";
    assert_eq!(got, want);
    assert_eq!(
        std::fs::read_to_string(dir.join("data.txt")).unwrap(),
        "inside\n"
    );
    assert!(!dir.join("new.txt").exists());

    // Without a directory, nothing can be opened.
    let mut rt = rt_with(&LuaConfig::default(), FILES);
    let f = rt.function("files").unwrap();
    let r = rt.call(f, &mut pkt(), FlowId(1), &args);
    assert!(
        matches!(&r.error, Some(CallError::Script(m)) if m.contains("no script directory")),
        "{:?}",
        r.error
    );
    rt.load("t2.lua", "function one(pkt) pkt:send(try('data.txt')) end")
        .unwrap();
    assert_eq!(
        sent(&mut rt, "one"),
        "refused: data.txt: no script directory configured"
    );

    // A directory that does not exist is a configuration error.
    let bad = LuaConfig {
        dir: Some(base.join("nope")),
        ..LuaConfig::default()
    };
    assert!(Runtime::new(&bad).is_err());
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn load_file_names_the_path() {
    let (base, dir) = scratch("load");
    let path = dir.join("bad.lua");
    std::fs::write(&path, "function f(pkt)\n  return\nend end\n").unwrap();
    let mut rt = Runtime::new(&LuaConfig::default()).unwrap();
    let e = rt.load_file(&path).unwrap_err();
    assert_eq!(e.chunk, path.display().to_string());
    assert_eq!(e.line, Some(3));
    let good = dir.join("good.lua");
    std::fs::write(&good, "function g(pkt) return 'drop' end\n").unwrap();
    rt.load_file(&good).unwrap();
    let g = rt.function("g").unwrap();
    assert_eq!(
        rt.call(g, &mut pkt(), FlowId(1), &[]).verdict,
        Verdict::Drop
    );
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn protected_calls_and_coroutines_still_work() {
    let mut rt = rt(r#"
    function f(pkt)
      local ok1, e1 = pcall(error, { code = 7 })
      local ok2, e2 = pcall(error, "plain", 0)
      local ok3, v3 = pcall(function(a, b) return a + b end, 2, 3)
      local ok4, e4 = xpcall(function() error("deep", 0) end, function(e) return "handled " .. e end)
      local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i * 10) end end)
      local g = gen() .. "," .. gen() .. "," .. gen()
      local co = coroutine.create(function() error("in co", 0) end)
      local ok5, e5 = coroutine.resume(co)
      local ok6, e6 = pcall(coroutine.wrap(function() error("wrapped", 0) end))
      closed = "no"
      pcall(coroutine.wrap(function()
        local x <close> = setmetatable({}, { __close = function() closed = "yes" end })
        error("with tbc")
      end))
      pkt:send(table.concat({ closed, tostring(ok1), tostring(e1.code), tostring(ok2), e2, tostring(ok3),
        tostring(v3), tostring(ok4), e4, g, tostring(ok5), e5, coroutine.status(co),
        tostring(ok6), e6 }, "|"))
    end
    function spin_after_coroutines(pkt)
      local gen = coroutine.wrap(function() coroutine.yield(1) end)
      gen()
      coroutine.resume(coroutine.create(function() end))
      while true do end
    end
    "#);
    let want =
        "yes|false|7|false|plain|true|5|false|handled deep|10,20,30|false|in co|dead|false|wrapped";
    assert_eq!(sent(&mut rt, "f"), want);
    let s = rt.function("spin_after_coroutines").unwrap();
    for _ in 0..2 {
        let r = rt.call(s, &mut pkt(), FlowId(1), &[]);
        assert_eq!(r.error, Some(CallError::Budget));
    }
    // The budget overruns left nothing behind.
    assert_eq!(sent(&mut rt, "f"), want);
}
