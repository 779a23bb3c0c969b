//! Lua timers (`timer_set`, `timer_del`, `timer_info`, `timer_enum`, `rawsend`) on a fake
//! clock: periodic and one-shot timers fire when due, replacing restarts the countdown,
//! failing timers are deleted and counted, the number of timers is bounded, and what a
//! timer sends comes out of the engine's queue-out through `Stateful::tick` (also for a
//! timer a packet's function set).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use weir_engine::stateful::TICK_NS;
use weir_script::config::ScriptsConfig;
use weir_script::lua::{FlowId, LuaConfig, PacketView, Runtime, TimerStats, MAX_TIMERS};
use weir_script::Scripts;

mod scripts_common;
use scripts_common::*;

const MS: u64 = 1_000_000;
/// The fake clock's start (any value: the engine's clock is monotonic, not from 0).
const T0: u64 = 5_000_000_000_000;

fn runtime(code: &str) -> Runtime {
    let mut rt = Runtime::new(&LuaConfig::default()).unwrap();
    rt.load("t.lua", code).unwrap();
    rt
}

/// What the timers due at `t` sent, as strings.
fn run(rt: &mut Runtime, t: u64) -> Vec<String> {
    rt.run_timers(t)
        .into_iter()
        .map(|p| String::from_utf8(p).unwrap())
        .collect()
}

/// Calls the global function `f` as a packet's script would (its sends returned).
fn call(rt: &mut Runtime, f: &str) -> Vec<String> {
    let f = rt.function(f).unwrap();
    let mut v = PacketView::new(Vec::new(), true);
    let r = rt.call(f, &mut v, FlowId(1), &[]);
    assert_eq!(r.error, None);
    r.send
        .into_iter()
        .map(|p| String::from_utf8(p).unwrap())
        .collect()
}

const LOG: &str = r#"
fires = {}
function log(name, data)
  fires[name] = (fires[name] or 0) + 1
  rawsend(name .. ":" .. tostring(data) .. ":" .. fires[name])
end
"#;

#[test]
fn periodic_timer_fires_each_period_and_skips_missed_ones() {
    let mut rt = runtime(&format!("{LOG} timer_set('p', 'log', 100, false, 'd')"));
    assert_eq!(rt.timers(), 1);
    // set at load time: the countdown starts with the first run
    assert!(run(&mut rt, T0).is_empty());
    assert!(run(&mut rt, T0 + 99 * MS).is_empty());
    assert_eq!(run(&mut rt, T0 + 100 * MS), ["p:d:1"]);
    assert!(run(&mut rt, T0 + 150 * MS).is_empty());
    assert_eq!(run(&mut rt, T0 + 200 * MS), ["p:d:2"]);
    // late: once, not once per missed period; then one period from now
    assert_eq!(run(&mut rt, T0 + 450 * MS), ["p:d:3"]);
    assert!(run(&mut rt, T0 + 549 * MS).is_empty());
    assert_eq!(run(&mut rt, T0 + 550 * MS), ["p:d:4"]);
    assert_eq!(rt.timers(), 1);
    let st = rt.timer_stats();
    assert_eq!((st.calls, st.sent, st.errors), (4, 4, 0));
}

#[test]
fn one_shot_timer_fires_once_and_goes() {
    let mut rt = runtime(&format!(
        "{LOG} function arm() timer_set('o', log, 30, true, 7) end"
    ));
    assert!(run(&mut rt, T0).is_empty());
    // set from a packet's call: due 30 ms after the last clock seen
    assert!(call(&mut rt, "arm").is_empty());
    assert_eq!(rt.timers(), 1);
    assert!(run(&mut rt, T0 + 29 * MS).is_empty());
    assert_eq!(run(&mut rt, T0 + 30 * MS), ["o:7:1"]);
    assert_eq!(rt.timers(), 0);
    assert!(run(&mut rt, T0 + 1000 * MS).is_empty());
}

#[test]
fn timers_fire_earliest_first_and_may_rearm_themselves() {
    let mut rt = runtime(&format!(
        "{LOG}
        function again(name, n)
          log(name, n)
          if n < 3 then timer_set(name, again, 10, true, n + 1) end
        end
        timer_set('b', log, 20, true)
        timer_set('a', log, 30, true)
        timer_set('r', again, 10, true, 1)"
    ));
    assert!(run(&mut rt, T0).is_empty());
    // all due: by due time, not by name
    assert_eq!(run(&mut rt, T0 + 40 * MS), ["r:1:1", "b:nil:1", "a:nil:1"]);
    // the one-shot set itself again from its own call
    assert_eq!(rt.timers(), 1);
    assert_eq!(run(&mut rt, T0 + 50 * MS), ["r:2:2"]);
    assert_eq!(run(&mut rt, T0 + 60 * MS), ["r:3:3"]);
    assert_eq!(rt.timers(), 0);
}

#[test]
fn set_replaces_and_restarts_del_info_enum() {
    let mut rt = runtime(&format!(
        "{LOG}
        function setup()
          timer_set('z', log, 100, false, 'old')
          timer_set('a', log, 500, true)
        end
        function replace() timer_set('z', 'log', 100, false, 'new') end
        function del() rawsend(tostring(timer_del('a')) .. ' ' .. tostring(timer_del('a'))) end
        function enum() rawsend(table.concat(timer_enum(), ',')) end
        function info()
          local i = timer_info('z')
          rawsend(string.format('%s %s %s %s %s %s', i.name, i.period, tostring(i.oneshot),
            i.fires, i.next, tostring(i.func == log)))
          rawsend(tostring(timer_info('nope')))
        end"
    ));
    assert!(run(&mut rt, T0).is_empty());
    call(&mut rt, "setup");
    assert_eq!(call(&mut rt, "enum"), ["a,z"]);
    assert!(run(&mut rt, T0 + 80 * MS).is_empty());
    assert_eq!(call(&mut rt, "info"), ["z 100 false 0 20 true", "nil"]);
    // replaced at 80 ms: due at 180, with the new data
    call(&mut rt, "replace");
    assert_eq!(call(&mut rt, "info")[0], "z 100 false 0 100 true");
    assert!(run(&mut rt, T0 + 100 * MS).is_empty());
    assert_eq!(run(&mut rt, T0 + 180 * MS), ["z:new:1"]);
    assert_eq!(call(&mut rt, "info")[0], "z 100 false 1 100 true");
    assert_eq!(call(&mut rt, "del"), ["true false"]);
    assert_eq!(call(&mut rt, "enum"), ["z"]);
    assert_eq!(rt.timers(), 1);
    // 'a' was due at 580: deleted, it does not fire
    assert_eq!(run(&mut rt, T0 + 600 * MS), ["z:new:2"]);
}

#[test]
fn failing_timer_is_deleted_counted_and_sends_nothing() {
    let mut rt = runtime(&format!(
        "{LOG}
        function bad(name) rawsend('lost') error('boom') end
        function mem() local t = {{}} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end end
        timer_set('bad', bad, 10)
        timer_set('mem', mem, 10)
        timer_set('ok', log, 10)
        timer_set('perr', function() pcall(error, 'caught') rawsend('fine') end, 10)"
    ));
    let mut rt_small = {
        let cfg = LuaConfig {
            memory_limit: 8 << 20,
            instruction_budget: 100_000_000,
            ..LuaConfig::default()
        };
        let mut r = Runtime::new(&cfg).unwrap();
        r.load(
            "m.lua",
            "timer_set('mem', function() local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end end, 10)",
        )
        .unwrap();
        r
    };
    assert!(run(&mut rt, T0).is_empty());
    let mut out = run(&mut rt, T0 + 10 * MS);
    out.sort();
    assert_eq!(out, ["fine", "ok:nil:1"]);
    // `mem` ran out of its budget or memory (whichever first: either counts)
    let st = rt.timer_stats();
    assert_eq!(
        (st.calls, st.errors, st.budget_exceeded + st.memory_exceeded),
        (4, 1, 1)
    );
    assert_eq!(rt.timers(), 2);
    let mut out = run(&mut rt, T0 + 20 * MS);
    out.sort();
    assert_eq!(out, ["fine", "ok:nil:2"]);

    assert!(run(&mut rt_small, T0).is_empty());
    assert!(run(&mut rt_small, T0 + 10 * MS).is_empty());
    assert_eq!(
        rt_small.timer_stats(),
        TimerStats {
            calls: 1,
            memory_exceeded: 1,
            ..TimerStats::default()
        }
    );
    assert_eq!(rt_small.timers(), 0);
}

#[test]
fn looping_timer_is_stopped_by_the_budget() {
    let mut rt = runtime(
        "timer_set('loop', function() while true do end end, 5)
         timer_set('pl', function() while true do pcall(function() while true do end end) end end, 5)",
    );
    assert!(run(&mut rt, T0).is_empty());
    let t = Instant::now();
    assert!(run(&mut rt, T0 + 5 * MS).is_empty());
    assert!(t.elapsed() < Duration::from_secs(5));
    let st = rt.timer_stats();
    assert_eq!((st.calls, st.budget_exceeded, st.errors), (2, 2, 0));
    assert_eq!(rt.timers(), 0);
}

#[test]
fn number_of_timers_is_bounded() {
    let code = format!(
        "for i = 1, {MAX_TIMERS} do timer_set('t' .. i, function() end, 1000) end
         -- replacing one at the limit is fine
         timer_set('t1', function() end, 5)
         function more() timer_set('one-too-many', function() end, 5) end"
    );
    let mut rt = runtime(&code);
    assert_eq!(rt.timers(), MAX_TIMERS);
    let f = rt.function("more").unwrap();
    let r = rt.call(f, &mut PacketView::new(Vec::new(), true), FlowId(1), &[]);
    match r.error {
        Some(weir_script::lua::CallError::Script(m)) => {
            assert!(m.contains(&format!("at most {MAX_TIMERS} timers")), "{m}")
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(rt.timers(), MAX_TIMERS);
    let mut rt2 = Runtime::new(&LuaConfig::default()).unwrap();
    let e = rt2
        .load(
            "x.lua",
            &format!(
                "for i = 1, {} do timer_set('t' .. i, print or tostring, 1) end",
                MAX_TIMERS + 1
            ),
        )
        .unwrap_err();
    assert!(e.message.contains("timers"), "{e}");
}

#[test]
fn bad_arguments_are_errors() {
    for code in [
        "timer_set('x', 'nosuch', 10)",
        "timer_set('x', 42, 10)",
        "timer_set('x', tostring, -1)",
        "timer_set('x', tostring, 1.5)",
        "timer_set('x', tostring, 'soon')",
        "timer_set(string.rep('n', 300), tostring, 10)",
    ] {
        let mut rt = Runtime::new(&LuaConfig::default()).unwrap();
        assert!(rt.load("x.lua", code).is_err(), "{code}");
        assert_eq!(rt.timers(), 0, "{code}");
    }
}

/// A fresh directory holding `t.lua`.
fn scratch(name: &str, code: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-lua-timers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("t.lua"), code).unwrap();
    d
}

#[test]
fn timer_sends_leave_through_stateful_tick() {
    let code = r#"
        function noop() end
        timer_set('ping', function(name, dst)
          -- an IPv4 header, protocol 253 (experiments), to dst
          rawsend(string.char(0x45, 0, 0, 20, 0, 0, 0, 0, 64, 253, 0, 0,
                              198, 18, 0, 1, table.unpack(dst)))
        end, 50, false, {198, 19, 0, 1})
    "#;
    let dir = scratch("tick", code);
    let cfg: ScriptsConfig = serde_json::from_str(
        r#"{"lua": ["t.lua"], "profile": [{"queue": 200, "name": "p",
            "instance": [{"desync": "noop"}]}]}"#,
    )
    .unwrap();
    let scripts = Scripts::new(&cfg, &dir).unwrap();
    let mut sf = engine(RULES);
    assert!(!sf.tick(T0), "no hook: nothing timed");
    sf.set_flow_hook(Some(Box::new(scripts)));
    // the first tick starts the countdown
    assert!(sf.tick(T0));
    assert!(sf.ticking());
    assert!(!sf.queue_out_pending());
    assert!(sf.tick(T0 + 50 * MS));
    let out = sf.take_queue_out();
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0][..4], &[0x45, 0, 0, 20]);
    assert_eq!(&out[0][16..20], &[198, 19, 0, 1]);
    // due again at 100 ms; a tick sooner than TICK_NS after the last does nothing
    assert!(sf.tick(T0 + 100 * MS));
    assert_eq!(sf.take_queue_out().len(), 1);
    assert!(sf.tick(T0 + 150 * MS - 1));
    assert!(sf.tick(T0 + 150 * MS + TICK_NS - 2));
    assert!(!sf.queue_out_pending());
    assert!(sf.tick(T0 + 150 * MS + TICK_NS));
    assert_eq!(sf.take_queue_out().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timer_set_by_a_packets_function_fires_through_the_engine() {
    // the client's SYN, sent again by a one-shot timer 200 ms after it passed
    let code = r#"
        function arm(pkt)
          if pkt.tcp_flags == 2 then
            timer_set('again', function(name, raw) rawsend(raw) end, 200, true, pkt:bytes(1))
          end
        end
    "#;
    let dir = scratch("arm", code);
    let cfg: ScriptsConfig = serde_json::from_str(
        r#"{"lua": ["t.lua"], "profile": [{"queue": 200, "name": "p",
            "instance": [{"desync": "arm:payload=all"}]}]}"#,
    )
    .unwrap();
    let mut sf = engine(RULES);
    sf.set_flow_hook(Some(Box::new(Scripts::new(&cfg, &dir).unwrap())));
    // no timers yet
    assert!(!sf.tick(T0));
    let sent = handshake_at(&mut sf, T0 + MS);
    assert!(sent.iter().all(|s| s.is_empty()));
    // set from the tick's clock (T0): due at T0 + 200 ms
    assert!(sf.tick(T0 + 150 * MS));
    assert!(!sf.queue_out_pending());
    assert!(!sf.tick(T0 + 200 * MS), "the one-shot is gone");
    let out = sf.take_queue_out();
    assert_eq!(out.len(), 1);
    let (seq, _, payload, csum_ok) = seg(&out[0]);
    assert_eq!((seq, payload.len(), csum_ok), (ISN - 1, 0, true));
    assert_eq!(out[0][9], 6);
    let _ = std::fs::remove_dir_all(&dir);
}
