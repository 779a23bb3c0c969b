//! `pkt:desync`: the native desync actions called from Lua. End to end through the engine, a
//! Lua function doing nfqws2's seed profile (`fake` with fooling, then `multisplit`) sends
//! exactly what the same native instances send, with the same verdict; on the runtime, the
//! action sees the script's changes, its verdict joins the call's, its arguments are parsed
//! once per distinct pair, bad names and arguments are counted errors that pass the packet,
//! and the send bound, the instruction budget and the memory limit still hold.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use weir_conntrack::Config;
use weir_engine::stateful::{FlowHook, QueueVerdict, Queued, Stateful};
use weir_engine::{Compiled, Decision, DropReason, Engine, Mode};
use weir_script::config::ScriptsConfig;
use weir_script::desync::{self, blobs::make_client_hello, Action, Blobs, Input};
use weir_script::l7::{self, L4};
use weir_script::lua::{
    CallError, FlowId, LuaConfig, PacketView, Runtime, Verdict, DESYNC_CACHE, DESYNC_COST, MAX_SEND,
};
use weir_script::payload::PayloadType;
use weir_script::Scripts;
use weir_wire::build::{tcp_flags, Builder, Tcp};

mod scripts_common;
use scripts_common::{forward, tcp, CLIENT, ISN, SERVER};

const QDROP: Decision = Decision::Drop(DropReason::Queue(200));

/// Both directions queued, so that the scripts see the server's TTL (autottl).
const RULES_BOTH: &str = "table inet z {
  chain post {
    type filter hook postrouting priority 101;
    tcp dport 443 queue num 200
    tcp sport 443 queue num 200
  }
}
";

/// zapret2's ClientHello for iana.org, from ../shared beside the checkout; None (the test
/// says why and skips) when it is not there.
fn hello() -> Option<Vec<u8>> {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for up in ["../../../shared", "../../shared"] {
        let p = base
            .join(up)
            .join("zapret2/files/fake/tls_clienthello_iana_org.bin");
        if let Ok(b) = std::fs::read(&p) {
            return Some(b);
        }
    }
    eprintln!(
        "SKIP: zapret2's tls_clienthello_iana_org.bin: no ../shared/zapret2/files/fake above {}",
        base.display()
    );
    None
}

struct SharedHook(Arc<Mutex<Scripts>>);

impl FlowHook for SharedHook {
    fn listens(&self, num: u16) -> bool {
        self.0.lock().unwrap().listens(num)
    }
    fn queued(&mut self, q: Queued<'_>) -> QueueVerdict {
        self.0.lock().unwrap().queued(q)
    }
}

fn scratch(name: &str, code: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-lua-desync-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("t.lua"), code).unwrap();
    d
}

/// The engine with queue 200's profile made of `instances` (loading `code` as t.lua when
/// given).
fn setup(name: &str, code: Option<&str>, instances: &[&str]) -> (Stateful, Arc<Mutex<Scripts>>) {
    let rs = weir_lang::load_str("t.nft", RULES_BOTH)
        .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)))
        .0;
    let mut sf = Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        Config::default(),
    );
    let inst: Vec<String> = instances
        .iter()
        .map(|d| format!(r#"{{"desync": "{d}"}}"#))
        .collect();
    let lua = if code.is_some() {
        r#""lua": ["t.lua"],"#
    } else {
        ""
    };
    let json = format!(
        r#"{{{lua} "profile": [{{"queue": 200, "name": "p", "instance": [{}]}}]}}"#,
        inst.join(",")
    );
    let cfg: ScriptsConfig = serde_json::from_str(&json).unwrap();
    let dir = scratch(name, code.unwrap_or(""));
    let s = Arc::new(Mutex::new(Scripts::new(&cfg, &dir).unwrap()));
    sf.set_flow_hook(Some(Box::new(SharedHook(s.clone()))));
    (sf, s)
}

/// SYN, SYN+ACK (from a server 14 hops away: TTL 50), ACK, each accepted with nothing sent.
fn handshake(sf: &mut Stateful) {
    let mut synack = Tcp::new(443, 40000, 0x12);
    synack.seq = 7;
    synack.ack = ISN;
    let synack = Builder::new().ttl(50).tcp(SERVER, CLIENT, &synack, b"");
    for frame in [
        tcp(0x02, ISN - 1, b"", true),
        synack,
        tcp(0x10, ISN, b"", true),
    ] {
        let (d, _, sent) = forward(sf, frame);
        assert_eq!((d, sent.len()), (Decision::Accept, 0), "{sent:?}");
    }
}

/// (seq, ttl, payload) of an IPv4/TCP packet.
fn seg(ip: &[u8]) -> (u32, u8, Vec<u8>) {
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let doff = (ip[ihl + 12] >> 4) as usize * 4;
    let seq = u32::from_be_bytes(ip[ihl + 4..ihl + 8].try_into().unwrap());
    (seq, ip[8], ip[ihl + doff..].to_vec())
}

const FAKE: &str = "fake:blob=fake_default_tls:ip_ttl=1:ip_autottl=-1,3-20:badsum";
const SPLIT: &str = "multisplit:pos=1,midsld";

/// The seed profile through the engine: what was sent for the ClientHello, the decision,
/// the frame as it left, and the scripts' counters after.
fn run_seed(
    name: &str,
    code: Option<&str>,
    instances: &[&str],
    h: &[u8],
) -> (
    Decision,
    Vec<u8>,
    Vec<Vec<u8>>,
    weir_script::scripts::ScriptStats,
) {
    let (mut sf, s) = setup(name, code, instances);
    handshake(&mut sf);
    let (d, out, sent) = forward(&mut sf, tcp(0x18, ISN, h, true));
    let st = s.lock().unwrap().stats();
    (d, out, sent, st)
}

#[test]
fn a_lua_seed_profile_sends_what_the_native_instances_send() {
    let Some(h) = hello() else { return };
    let (nd, nout, nsent, nst) = run_seed("native", None, &[FAKE, SPLIT], &h);
    // the native instances: the fake (autottl from the server's TTL 50: 14 hops, -1), then
    // the ClientHello in three parts at 1 and midsld, the original dropped
    assert_eq!(nd, QDROP);
    assert_eq!(nsent.len(), 4, "{nsent:?}");
    let fake_blob = Blobs::new().get("fake_default_tls").unwrap().to_vec();
    let (fs, fttl, fpay) = seg(&nsent[0]);
    assert_eq!((fs, fttl, fpay), (ISN, 13, fake_blob));
    let parts: Vec<_> = nsent[1..].iter().map(|p| seg(p)).collect();
    assert_eq!(parts[0].2.len(), 1);
    assert_eq!(
        parts.iter().flat_map(|p| p.2.clone()).collect::<Vec<u8>>(),
        h
    );
    assert!(parts.iter().all(|p| p.1 == 64));
    assert_eq!(nst.calls, 2);

    let table = r#"
function seed(pkt, args)
  pkt:desync("fake", {blob = "fake_default_tls", ip_ttl = 1, ip_autottl = "-1,3-20",
                      badsum = true})
  pkt:desync("multisplit", {pos = "1,midsld"})
end
"#;
    let spec = format!(
        "function seed(pkt, args)\n  pkt:desync(\"{FAKE}\")\n  \
         return pkt:desync(\"{SPLIT}\")\nend\n"
    );
    for (name, code) in [("table", table), ("spec", spec.as_str())] {
        let (d, out, sent, st) = run_seed(name, Some(code), &["seed"], &h);
        assert_eq!(d, nd, "{name}");
        assert_eq!(out, nout, "{name}");
        let summary = |s: &[Vec<u8>]| -> Vec<(u32, u8, usize)> {
            s.iter()
                .map(|p| {
                    let (q, t, pay) = seg(p);
                    (q, t, pay.len())
                })
                .collect()
        };
        assert_eq!(
            summary(&sent),
            summary(&nsent),
            "{name}: (seq, ttl, length)"
        );
        assert!(sent == nsent, "{name}: the same packets, in the same order");
        assert_eq!(
            (st.lua_calls, st.lua_errors, st.dropped, st.sent),
            (1, 0, 1, 4),
            "{name}"
        );
    }
}

#[test]
fn a_bad_action_through_the_engine_is_counted_and_the_packet_passes() {
    let code = r#"
function bad(pkt)
  pkt:desync("multisplit", {pos = "2", payload = "all"})
  pkt:desync("multisplit", {pos = "nowhere", payload = "all"})
end
"#;
    let (mut sf, s) = setup("bad", Some(code), &["bad:payload=all"]);
    handshake(&mut sf);
    let frame = tcp(0x18, ISN, b"some data", true);
    let (d, out, sent) = forward(&mut sf, frame.clone());
    assert_eq!((d, out, sent.len()), (Decision::Accept, frame, 0));
    // the SYN, the ACK and the data packet: each call failed
    let st = s.lock().unwrap().stats();
    assert_eq!(
        (st.lua_calls, st.lua_errors, st.sent, st.dropped),
        (3, 3, 0, 0)
    );
}

// ---- on the runtime -------------------------------------------------------------------

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);

/// An outgoing TCP packet carrying `payload`, described as scripts.rs describes it.
fn view(payload: &[u8]) -> PacketView {
    let p = Builder::raw().tcp(
        SRC,
        DST,
        &Tcp::new(40000, 443, tcp_flags::PSH | tcp_flags::ACK).seq(1000),
        payload,
    );
    let mut v = PacketView::new(p, true);
    let det = l7::detect(L4::Tcp, payload);
    v.ptype = det.ptype;
    v.markers = det.markers;
    v.incoming_ttl = Some(50);
    v
}

fn rt_with(cfg: &LuaConfig, code: &str) -> Runtime {
    let mut rt = Runtime::new(cfg).unwrap();
    rt.load("t.lua", code).unwrap();
    rt
}

fn rt(code: &str) -> Runtime {
    rt_with(&LuaConfig::default(), code)
}

fn call(rt: &mut Runtime, name: &str, v: &mut PacketView) -> weir_script::lua::CallResult {
    let f = rt.function(name).unwrap();
    rt.call(f, v, FlowId(1), &[])
}

/// The native action on `v`'s packet.
fn native(spec: &str, v: &PacketView) -> desync::Output {
    let (name, args) = weir_script::config::split_desync(spec).unwrap();
    let a = Action::parse(&name, &args).unwrap();
    desync::apply(
        &a,
        &Input {
            packet: &v.packet,
            ptype: v.ptype,
            markers: v.markers,
            incoming_ttl: v.incoming_ttl,
        },
        &Blobs::new(),
    )
}

#[test]
fn the_verdict_joins_the_calls_and_is_returned_with_the_count() {
    let mut rt = rt(r#"
function f(pkt)
  local v, n = pkt:desync("multisplit:pos=sld")
  pkt:send(tostring(v == VERDICT_DROP) .. " " .. n)
  return "pass"
end
function g(pkt)
  local v, n = pkt:desync("fake", {blob = "0x00", ip_ttl = 3})
  pkt:send(tostring(v == VERDICT_PASS) .. " " .. n)
end
"#);
    let v0 = view(&make_client_hello("example.com"));
    let want = native("multisplit:pos=sld", &v0);
    assert_eq!((want.verdict, want.send.len()), (desync::Verdict::Drop, 2));
    let mut v = v0.clone();
    let r = call(&mut rt, "f", &mut v);
    assert_eq!(r.error, None);
    assert_eq!(r.verdict, Verdict::Drop, "drop over the pass returned");
    let mut sends = want.send.clone();
    sends.push(b"true 2".to_vec());
    assert_eq!(r.send, sends);
    assert_eq!(v, v0, "the packet itself untouched");

    let want = native("fake:blob=0x00:ip_ttl=3", &v0);
    let mut v = v0.clone();
    let r = call(&mut rt, "g", &mut v);
    assert_eq!(r.verdict, Verdict::Pass);
    assert_eq!(r.send, [want.send, vec![b"true 1".to_vec()]].concat());
}

#[test]
fn the_action_sees_the_scripts_changes_and_a_modify_replaces_the_packet() {
    let mut rt = rt(r#"
function f(pkt)
  pkt:set_payload("hello world")
  return pkt:desync("multisplit:pos=2:payload=all")
end
function g(pkt)
  local v = pkt:desync("pktmod:ip_ttl=9:payload=all")
  pkt:send(pkt:bytes(9, 9) .. v .. pkt.payload)
end
"#);
    let mut v = view(b"original data");
    let r = call(&mut rt, "f", &mut v);
    assert_eq!((r.error.clone(), r.verdict), (None, Verdict::Drop));
    let pays: Vec<_> = r.send.iter().map(|p| seg(p).2).collect();
    assert_eq!(pays, vec![b"he".to_vec(), b"llo world".to_vec()]);

    let v0 = view(b"data");
    let want = native("pktmod:ip_ttl=9", &v0);
    assert_eq!(want.verdict, desync::Verdict::Modify);
    let m = want.modified.unwrap();
    let mut v = v0.clone();
    let r = call(&mut rt, "g", &mut v);
    assert_eq!((r.error, r.verdict), (None, Verdict::Modify));
    assert_eq!(v.packet, m, "the packet is the action's");
    assert!(v.modified);
    assert_eq!(r.send, vec![b"\x091data".to_vec()]);
}

#[test]
fn arguments_are_parsed_once_per_distinct_pair() {
    let mut rt = rt(r#"
function f(pkt)
  for i = 1, 50 do
    pkt:desync("multisplit", {payload = "http_req", pos = "2"})
    pkt:desync("multisplit", {pos = "2", payload = "http_req", nodrop = false})
    pkt:desync("multisplit:pos=2", {payload = "http_req"})
    pkt:desync("multisplit:pos=2:payload=http_req")
    pkt:desync("fake:blob=0x00:dir=in")
  end
  return pkt:desync("multisplit:pos=2:payload=all")
end
"#);
    let mut v = view(b"some payload");
    let r = call(&mut rt, "f", &mut v);
    assert_eq!((r.error, r.send.len()), (None, 2));
    // the two tables with the same pairs (in another order, a false flag) share one; the
    // spec with its arguments and the spec with a table are other pairs
    assert_eq!(rt.desync_actions(), 5);
    let r = call(&mut rt, "f", &mut view(b"other"));
    assert_eq!(r.error, None);
    assert_eq!(rt.desync_actions(), 5);
}

#[test]
fn the_cache_is_bounded_and_past_it_actions_still_run() {
    let cfg = LuaConfig {
        instruction_budget: 10_000_000,
        ..LuaConfig::default()
    };
    let mut rt = rt_with(
        &cfg,
        r#"
function f(pkt)
  for i = 1, DESYNC_CACHE + 100 do
    pkt:desync("multisplit:payload=http_req:pos=" .. i)
  end
  return pkt:desync("multisplit:payload=all:pos=2")
end
"#,
    );
    rt.load("n.lua", &format!("DESYNC_CACHE = {DESYNC_CACHE}"))
        .unwrap();
    let r = call(&mut rt, "f", &mut view(b"some payload"));
    assert_eq!((r.error, r.verdict, r.send.len()), (None, Verdict::Drop, 2));
    assert_eq!(rt.desync_actions(), DESYNC_CACHE);
}

#[test]
fn bad_names_and_arguments_are_counted_errors_that_pass_the_packet() {
    let mut rt = rt(r#"
function f(pkt, args)
  pkt:send("queued")
  pkt:set_payload("changed")
  pkt:desync("multisplit:pos=2:payload=all")
  if args.k == "name" then pkt:desync("nosuchaction")
  elseif args.k == "pos" then pkt:desync("multisplit", {pos = "nowhere"})
  elseif args.k == "unknown" then pkt:desync("fake", {blob = "0x00", frobnicate = 1})
  elseif args.k == "value" then pkt:desync("fake", {blob = {}})
  elseif args.k == "missing" then pkt:desync("fake")
  elseif args.k == "dir" then pkt:desync("fake:blob=0x00:dir=up")
  end
end
"#);
    let f = rt.function("f").unwrap();
    let v0 = view(b"original");
    let cases = [
        ("name", "nosuchaction"),
        ("pos", "nowhere"),
        ("unknown", "frobnicate"),
        ("value", "blob is a table"),
        ("missing", "blob"),
        ("dir", "dir=up"),
    ];
    for (round, _) in [(), ()].iter().enumerate() {
        for (k, msg) in cases {
            let mut v = v0.clone();
            let r = rt.call(f, &mut v, FlowId(1), &[("k".into(), k.into())]);
            match &r.error {
                Some(CallError::Script(m)) => assert!(m.contains(msg), "{k}: {m}"),
                e => panic!("{k}: {e:?}"),
            }
            assert_eq!((r.verdict, r.send.len()), (Verdict::Pass, 0), "{k}");
            assert_eq!(v, v0, "{k}: the packet as it came (round {round})");
        }
    }
    let st = rt.stats()[0].1;
    assert_eq!((st.calls, st.errors), (12, 12));
    // and the runtime goes on
    let r = rt.call(f, &mut v0.clone(), FlowId(1), &[("k".into(), "ok".into())]);
    assert_eq!((r.error, r.verdict, r.send.len()), (None, Verdict::Drop, 3));
}

#[test]
fn the_send_bound_holds_across_pkt_send_and_desync() {
    let mut rt = rt(r#"
function f(pkt)
  for i = 1, 63 do pkt:send("x") end
  pkt:desync("multisplit:pos=2:payload=all")
end
function g(pkt)
  for i = 1, 62 do pkt:send("x") end
  pkt:desync("multisplit:pos=2:payload=all")
end
"#);
    let v0 = view(b"some payload");
    let mut v = v0.clone();
    let r = call(&mut rt, "f", &mut v);
    match &r.error {
        Some(CallError::Script(m)) => assert!(m.contains(&format!("at most {MAX_SEND}")), "{m}"),
        e => panic!("{e:?}"),
    }
    assert_eq!((r.verdict, r.send.len(), &v), (Verdict::Pass, 0, &v0));
    let r = call(&mut rt, "g", &mut v0.clone());
    assert_eq!((r.error, r.send.len()), (None, MAX_SEND));
}

#[test]
fn each_call_is_charged_to_the_budget() {
    // an action its filter skips sends nothing: only the budget stops the loop
    let cfg = LuaConfig {
        instruction_budget: 100_000,
        ..LuaConfig::default()
    };
    let mut rt = rt_with(
        &cfg,
        r#"
n = 0
function f(pkt)
  pkt:set_payload("changed")
  while true do
    n = n + 1
    pkt:desync("multisplit:pos=2:payload=http_req")
  end
end
function get_n(pkt) pkt:send(tostring(n)) end
"#,
    );
    let v0 = view(b"some payload");
    let mut v = v0.clone();
    let r = call(&mut rt, "f", &mut v);
    assert_eq!(r.error, Some(CallError::Budget));
    assert_eq!((r.verdict, r.send.len(), &v), (Verdict::Pass, 0, &v0));
    assert_eq!(rt.stats()[0].1.budget_exceeded, 1);
    // about budget / DESYNC_COST calls, not the thousands the loop's own instructions allow
    let r = call(&mut rt, "get_n", &mut view(b""));
    let n: u64 = String::from_utf8(r.send[0].clone())
        .unwrap()
        .parse()
        .unwrap();
    let most = 100_000 / DESYNC_COST + 1;
    assert!((most - 5..=most).contains(&n), "{n} calls");
}

#[test]
fn the_memory_limit_still_holds() {
    let cfg = LuaConfig {
        memory_limit: 8 << 20,
        // (string.rep is charged by its result's size: a budget the 64 MiB fit in)
        instruction_budget: 100_000_000,
        ..LuaConfig::default()
    };
    let mut rt = rt_with(
        &cfg,
        r#"
function f(pkt)
  pkt:desync("multisplit:pos=2:payload=all")
  local s = string.rep("x", 64 << 20)
  return "pass"
end
"#,
    );
    let v0 = view(b"some payload");
    let mut v = v0.clone();
    let r = call(&mut rt, "f", &mut v);
    assert_eq!(r.error, Some(CallError::Memory));
    assert_eq!((r.verdict, r.send.len(), &v), (Verdict::Pass, 0, &v0));
    assert_eq!(rt.stats()[0].1.memory_exceeded, 1);
}

#[test]
fn payload_and_dir_filter_as_for_an_instance() {
    let mut rt = rt(r#"
function f(pkt, args)
  args = args or {}
  local v, n = pkt:desync("fake", {blob = "0x00", dir = args.dir, payload = args.payload})
  pkt:send(v .. n)
end
"#);
    let f = rt.function("f").unwrap();
    let mut run = |v: &PacketView, args: &[(&str, &str)]| {
        let args: Vec<(String, String)> = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let r = rt.call(f, &mut v.clone(), FlowId(1), &args);
        assert_eq!(r.error, None);
        r.send.last().cloned().unwrap()
    };
    let unknown = view(b"not a known payload");
    assert_eq!(unknown.ptype, PayloadType::Unknown);
    let tls = view(&make_client_hello("example.com"));
    let mut incoming = tls.clone();
    incoming.outgoing = false;
    // payload=known and dir=out by default
    assert_eq!(run(&unknown, &[]), b"00");
    assert_eq!(run(&unknown, &[("payload", "all")]), b"01");
    assert_eq!(run(&tls, &[]), b"01");
    assert_eq!(run(&incoming, &[]), b"00");
    assert_eq!(run(&incoming, &[("dir", "in")]), b"01");
    assert_eq!(run(&incoming, &[("dir", "any")]), b"01");
    assert_eq!(run(&tls, &[("dir", "in")]), b"00");
}

#[test]
fn the_flows_blobs_are_the_runtimes() {
    let mut rt = rt(r#"function f(pkt) pkt:desync("fake:blob=mine:payload=all") end"#);
    let mut b = Blobs::new();
    b.insert("mine", b"MINE".to_vec());
    rt.set_blobs(b);
    let r = call(&mut rt, "f", &mut view(b"data"));
    assert_eq!(r.error, None);
    assert_eq!(r.send.len(), 1);
    assert_eq!(seg(&r.send[0]).2, b"MINE");
}

/// What a `pkt:desync` call costs over the native action, on a 1,000-byte TCP payload: the
/// seed profile's two actions native, from Lua with specs, from Lua with tables, a no-op Lua
/// call, and two calls their payload filter skips (`pkt.desync` looked up each time, or
/// once). A measurement, not a check: `cargo test --release -p weir-script --test
/// lua_desync -- --ignored --nocapture cost`.
#[test]
#[ignore]
fn cost_per_call() {
    use std::time::Instant;
    const N: u32 = 200_000;
    let v0 = view(&[b'x'; 1000]);
    let specs = [
        "multisplit:payload=all",
        "fake:ip_ttl=1:badsum:blob=0x10000000:payload=all",
    ];
    let actions: Vec<Action> = specs
        .iter()
        .map(|s| {
            let (n, a) = weir_script::config::split_desync(s).unwrap();
            let a: Vec<_> = a.into_iter().filter(|(k, _)| k != "payload").collect();
            Action::parse(&n, &a).unwrap()
        })
        .collect();
    let blobs = Blobs::new();
    let t = Instant::now();
    let mut sent = 0;
    for _ in 0..N {
        for a in &actions {
            let input = Input {
                packet: &v0.packet,
                ptype: v0.ptype,
                markers: v0.markers,
                incoming_ttl: v0.incoming_ttl,
            };
            sent += desync::apply(a, &input, &blobs).send.len();
        }
    }
    let native = t.elapsed().as_secs_f64() * 1e6 / N as f64;
    assert_eq!(sent, 3 * N as usize);
    let mut rt = rt(r#"
function noop(pkt) end
function spec(pkt)
  pkt:desync("multisplit:payload=all")
  pkt:desync("fake:ip_ttl=1:badsum:blob=0x10000000:payload=all")
end
function tab(pkt)
  pkt:desync("multisplit", {payload = "all"})
  pkt:desync("fake", {ip_ttl = 1, badsum = true, blob = "0x10000000", payload = "all"})
end
function skipped(pkt)
  pkt:desync("multisplit:payload=http_req")
  pkt:desync("fake:ip_ttl=1:badsum:blob=0x10000000:payload=http_req")
end
function hoisted(pkt)
  local d = pkt.desync
  d(pkt, "multisplit:payload=http_req")
  d(pkt, "fake:ip_ttl=1:badsum:blob=0x10000000:payload=http_req")
end
"#);
    let mut time = |name: &str| {
        let f = rt.function(name).unwrap();
        let t = Instant::now();
        for _ in 0..N {
            let mut v = v0.clone();
            let r = rt.call(f, &mut v, FlowId(1), &[]);
            assert_eq!(r.error, None);
        }
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    };
    let (noop, spec, tab) = (time("noop"), time("spec"), time("tab"));
    let (skipped, hoisted) = (time("skipped"), time("hoisted"));
    println!(
        "us per packet: native {native:.3}, noop Lua call {noop:.3}, Lua with specs {spec:.3}, \
         Lua with tables {tab:.3}; per desync call over the native action: specs {:.3}, \
         tables {:.3}; a call its payload filter skips {:.3} ({:.3} with pkt.desync hoisted)",
        (spec - noop - native) / 2.0,
        (tab - noop - native) / 2.0,
        (skipped - noop) / 2.0,
        (hoisted - noop) / 2.0
    );
}
