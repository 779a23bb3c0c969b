//! Lua functions behind `queue`, end to end through the engine: a ruleset queues a client's
//! TCP connection to port 443, `Scripts` runs the instances' Lua functions (from
//! `[scripts] lua` files) on its packets: verdicts, sends and changes on the wire, cutoff,
//! per-flow state across a connection and afresh for a new one, failing scripts passing
//! the packet (counted), and configuration errors.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use weir_engine::stateful::{FlowHook, QueueVerdict, Queued, Stateful};
use weir_engine::{Decision, DropReason};
use weir_script::config::ScriptsConfig;
use weir_script::Scripts;
use weir_wire::{LinkType, PacketMeta};

mod scripts_common;
use scripts_common::*;

const QDROP: Decision = Decision::Drop(DropReason::Queue(200));

/// `Scripts` must be `Send` (the engine's hook moves between threads).
#[test]
fn scripts_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<Scripts>();
    assert_send::<weir_script::lua::Runtime>();
}

/// The scripts shared with the test, to read their counters while the engine holds them
/// (which `Scripts` being `Send` allows).
struct SharedHook(Arc<Mutex<Scripts>>);

impl FlowHook for SharedHook {
    fn listens(&self, num: u16) -> bool {
        self.0.lock().unwrap().listens(num)
    }
    fn queued(&mut self, q: Queued<'_>) -> QueueVerdict {
        self.0.lock().unwrap().queued(q)
    }
}

/// A fresh directory holding `files`.
fn scratch(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-scripts-lua-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for (f, text) in files {
        std::fs::write(d.join(f), text).unwrap();
    }
    d
}

/// A configuration loading `t.lua` with one instance of queue 200.
fn config(extra: &str, desync: &str) -> ScriptsConfig {
    let json = format!(
        r#"{{"lua": ["t.lua"], {extra} "profile": [{{"queue": 200, "name": "p",
            "instance": [{{"desync": "{desync}"}}]}}]}}"#
    );
    serde_json::from_str(&json).unwrap()
}

fn setup(name: &str, code: &str, extra: &str, desync: &str) -> (Stateful, Arc<Mutex<Scripts>>) {
    let mut sf = engine(RULES);
    let dir = scratch(name, &[("t.lua", code)]);
    let s = Scripts::new(&config(extra, desync), &dir).unwrap();
    let s = Arc::new(Mutex::new(s));
    sf.set_flow_hook(Some(Box::new(SharedHook(s.clone()))));
    (sf, s)
}

fn handshake(sf: &mut Stateful) -> Vec<Vec<Vec<u8>>> {
    handshake_at(sf, 1_000)
}

/// The IP packet of an Ethernet frame, and where its TCP payload starts in it.
fn ip_of(frame: &[u8]) -> (Vec<u8>, usize) {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let ip = frame[pm.l3_off as usize..].to_vec();
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let doff = (ip[ihl + 12] >> 4) as usize * 4;
    (ip, ihl + doff)
}

#[test]
fn a_lua_function_drops_packets_starting_with_x() {
    let code = r#"
function dropx(pkt, args)
  if pkt.payload:sub(1, 1) == "X" then return "drop" end
end
"#;
    let (mut sf, s) = setup("dropx", code, "", "dropx:payload=all");
    handshake(&mut sf);
    let frame = tcp(0x18, ISN, b"Xabc", true);
    let (d, _, sent) = forward(&mut sf, frame);
    assert_eq!((d, sent.len()), (QDROP, 0));
    let frame = tcp(0x18, ISN + 4, b"Yabc", true);
    let (d, out, sent) = forward(&mut sf, frame.clone());
    assert_eq!((d, sent.len()), (Decision::Accept, 0));
    assert_eq!(out, frame, "passed unchanged");
    let st = s.lock().unwrap().stats();
    // SYN, ACK and the two data packets
    assert_eq!((st.lua_calls, st.dropped, st.lua_errors), (4, 1, 0));
}

#[test]
fn a_lua_function_sends_and_modifies_exact_bytes_on_the_wire() {
    // sends the packet's headers followed by SENT, its args and its counters; changes the
    // payload's first byte to 'Z' (set_byte fixes no checksum: the bytes are exact)
    let code = r#"
function sm(pkt, args)
  if #pkt.payload == 0 then return end
  pkt:send(pkt:bytes(1, pkt.payload_offset) .. "SENT" .. args.tag .. args.payload ..
    pkt.n .. pkt.d .. pkt.rn .. pkt.ptype)
  pkt:set_byte(pkt.payload_offset + 1, 0x5a)
end
"#;
    let (mut sf, _s) = setup("sendmod", code, "", "sm:tag=hi:payload=all");
    handshake(&mut sf);
    let frame = tcp(0x18, ISN, b"hello", true);
    let (ip, off) = ip_of(&frame);
    let (d, out, sent) = forward(&mut sf, frame.clone());
    assert_eq!(d, Decision::Accept);
    // the client's third packet, its first with data; the server's packets are not queued
    // (the rule takes dport 443), so its direction's counters stay 0
    let want_sent = [&ip[..off], b"SENThiall310unknown"].concat();
    assert_eq!(sent, vec![want_sent]);
    let mut want = frame.clone();
    let l3 = frame.len() - ip.len();
    want[l3 + off] = b'Z';
    assert_eq!(out, want, "the payload's first byte changed, nothing else");
}

#[test]
fn cutoff_on_the_first_call_stops_the_calls() {
    let code = r#"
calls = 0
function once(pkt)
  calls = calls + 1
  pkt:send("call " .. calls)
  pkt:cutoff()
end
"#;
    let (mut sf, s) = setup("cutoff", code, "", "once:payload=all");
    let sent = handshake(&mut sf);
    assert_eq!(sent[0], vec![b"call 1".to_vec()], "the SYN: the first call");
    assert!(sent[1].is_empty() && sent[2].is_empty(), "{sent:?}");
    for i in 0..3u32 {
        let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN + 4 * i, b"data", true));
        assert_eq!((d, sent.len()), (Decision::Accept, 0), "packet {i}");
    }
    let st = s.lock().unwrap().stats();
    assert_eq!(st.lua_calls, 1);
    // the direction done: the connection entry's bit says so, the listener is not called
    // (the SYN had no entry yet: the handshake's ACK still reached the scripts)
    assert!(st.done >= 1, "{st:?}");
    assert!(sf.stats().queue_done >= 3, "{:?}", sf.stats());
}

#[test]
fn flow_state_persists_and_a_new_connection_starts_empty() {
    let code = r#"
function count(pkt)
  local s = pkt.state
  s.n = (s.n or 0) + 1
  pkt:send("n=" .. s.n)
end
"#;
    let (mut sf, _s) = setup("state", code, "", "count:payload=all");
    let sent = handshake(&mut sf);
    assert_eq!(
        (&sent[0], &sent[2]),
        (&vec![b"n=1".to_vec()], &vec![b"n=2".to_vec()])
    );
    let (_, _, sent) = forward(&mut sf, tcp(0x18, ISN, b"data", true));
    assert_eq!(sent, vec![b"n=3".to_vec()]);
    // the client resets the connection (n=4); long after, the same tuple again
    let (_, _, sent) = forward(&mut sf, tcp(0x04, ISN + 4, b"", true));
    assert_eq!(sent, vec![b"n=4".to_vec()]);
    let later = 3_600_000_000_000;
    let sent = handshake_at(&mut sf, later);
    assert_eq!(
        sent[0],
        vec![b"n=1".to_vec()],
        "a new connection: empty state"
    );
    assert_eq!(sent[2], vec![b"n=2".to_vec()]);
}

#[test]
fn a_failing_function_passes_the_packet_is_counted_and_the_next_works() {
    let code = r#"
function spin(pkt)
  local p = pkt.payload
  if p == "loop" then
    pkt:set_byte(pkt.payload_offset + 1, 0)
    pkt:send("lost")
    while true do end
  elseif p == "boom" then
    error("boom")
  end
  if #p > 0 then pkt:send("ok " .. p) end
end
"#;
    let (mut sf, s) = setup(
        "spin",
        code,
        r#""instruction_budget": 100000,"#,
        "spin:payload=all",
    );
    handshake(&mut sf);
    let frame = tcp(0x18, ISN, b"loop", true);
    let (d, out, sent) = forward(&mut sf, frame.clone());
    assert_eq!((d, sent.len()), (Decision::Accept, 0));
    assert_eq!(out, frame, "passed unchanged");
    let st = s.lock().unwrap().stats();
    assert_eq!((st.lua_budget, st.lua_errors), (1, 0));
    let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN + 4, b"next", true));
    assert_eq!((d, sent), (Decision::Accept, vec![b"ok next".to_vec()]));
    let frame = tcp(0x18, ISN + 8, b"boom", true);
    let (d, out, sent) = forward(&mut sf, frame.clone());
    assert_eq!((d, sent.len(), out), (Decision::Accept, 0, frame));
    let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN + 12, b"more", true));
    assert_eq!((d, sent), (Decision::Accept, vec![b"ok more".to_vec()]));
    let sc = s.lock().unwrap();
    let st = sc.stats();
    assert_eq!((st.lua_budget, st.lua_errors, st.lua_calls), (1, 1, 6));
    let fs = sc.lua().unwrap().stats();
    assert_eq!(fs[0].0, "spin");
    assert_eq!(
        (fs[0].1.calls, fs[0].1.budget_exceeded, fs[0].1.errors),
        (6, 1, 1)
    );
}

#[test]
fn dir_and_payload_args_filter_before_the_call() {
    // default payload filter: known types only; an unknown payload never reaches it
    let code = r#"function f(pkt, args) pkt:send("called") end"#;
    let (mut sf, s) = setup("filter", code, "", "f:dir=in:payload=all");
    handshake(&mut sf);
    let (_, _, sent) = forward(&mut sf, tcp(0x18, ISN, b"data", true));
    assert!(sent.is_empty(), "dir=in: outgoing packets not taken");
    assert_eq!(s.lock().unwrap().stats().lua_calls, 0);
    let (mut sf, s) = setup("filter2", code, "", "f");
    handshake(&mut sf);
    let (_, _, sent) = forward(&mut sf, tcp(0x18, ISN, b"data", true));
    assert!(sent.is_empty(), "payload=known by default");
    assert_eq!(s.lock().unwrap().stats().lua_calls, 0);
}

#[test]
fn configuration_errors_name_the_file_line_or_instance() {
    let dir = scratch(
        "errors",
        &[
            ("ok.lua", "function f(pkt) end\nnotfn = 3\n"),
            (
                "bad.lua",
                "function f(pkt)\n  return 1\nend\nlocal x = = 2\n",
            ),
        ],
    );
    let cfg = |json: &str| -> ScriptsConfig { serde_json::from_str(json).unwrap() };
    let err = |json: &str| {
        Scripts::new(&cfg(json), &dir)
            .err()
            .unwrap_or_else(|| panic!("{json}: accepted"))
    };
    let e = err(r#"{"lua": ["ok.lua"], "profile": [{"queue": 1, "name": "p",
            "instance": [{"desync": "nosuchfn:x=1"}]}]}"#);
    assert!(
        e.contains("profile \"p\"") && e.contains("nosuchfn:x=1") && e.contains("no global"),
        "{e}"
    );
    let e = err(r#"{"lua": ["ok.lua"], "profile": [{"queue": 1, "name": "p",
            "instance": [{"desync": "notfn"}]}]}"#);
    assert!(e.contains("notfn") && e.contains("integer"), "{e}");
    let e = err(r#"{"lua": ["ok.lua", "bad.lua"]}"#);
    assert!(e.contains("bad.lua:4"), "{e}");
    let e = err(r#"{"lua": ["missing.lua"]}"#);
    assert!(e.contains("missing.lua"), "{e}");
    // no Lua loaded: an unknown function stays an unknown function
    let e = err(r#"{"profile": [{"queue": 1, "name": "p", "instance": [{"desync": "f"}]}]}"#);
    assert!(e.contains("unknown desync function 'f'"), "{e}");
    // with `dir`, files are relative to it
    let ok = Scripts::new(
        &cfg(
            r#"{"dir": "sub", "lua": ["in_sub.lua"], "profile": [{"queue": 1, "name": "p",
                "instance": [{"desync": "g"}]}]}"#,
        ),
        &{
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::write(dir.join("sub/in_sub.lua"), "function g(pkt) end").unwrap();
            dir.clone()
        },
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
    // a native action keeps its meaning even with Lua loaded
    let ok = Scripts::new(
        &cfg(r#"{"lua": ["ok.lua"], "profile": [{"queue": 1, "name": "p",
                "instance": [{"desync": "multisplit"}, {"desync": "f"}]}]}"#),
        Path::new(&dir),
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
}
