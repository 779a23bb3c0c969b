//! The Lua runtime: loading, calls, packet accessors, verdicts, send / cutoff / drop, and
//! per-flow state.

use std::net::Ipv4Addr;

use weir_script::lua::{CallError, Counters, FlowId, LuaConfig, PacketView, Runtime, Verdict};
use weir_script::payload::{PayloadType, Protocol};
use weir_wire::build::{tcp_flags, Builder, Tcp};

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);

fn tcp_packet(payload: &[u8]) -> Vec<u8> {
    Builder::raw().ttl(57).tcp(
        SRC,
        DST,
        &Tcp::new(40000, 443, tcp_flags::PSH | tcp_flags::ACK)
            .seq(0x1122_3344)
            .ack(0x5566_7788),
        payload,
    )
}

fn view(payload: &[u8]) -> PacketView {
    let mut v = PacketView::new(tcp_packet(payload), true);
    v.ptype = PayloadType::TlsClientHello;
    v.l7 = Some(Protocol::Tls);
    v.host = Some("example.com".into());
    v.own = Counters {
        packets: 3,
        data_packets: 1,
        bytes: 517,
        seq: 1,
        len: 0,
    };
    v.reverse = Counters {
        packets: 2,
        data_packets: 0,
        bytes: 0,
        seq: 0,
        len: 0,
    };
    v
}

fn runtime(code: &str) -> Runtime {
    let mut rt = Runtime::new(&LuaConfig::default()).unwrap();
    rt.load("test.lua", code).unwrap();
    rt
}

#[test]
fn syntax_error_gives_chunk_and_line() {
    let mut rt = Runtime::new(&LuaConfig::default()).unwrap();
    let e = rt
        .load(
            "broken.lua",
            "function f(pkt)\n  return 1\nend\nlocal x = = 2\n",
        )
        .unwrap_err();
    assert_eq!(e.chunk, "broken.lua");
    assert_eq!(e.line, Some(4));
    assert!(e.message.contains("unexpected symbol"), "{}", e.message);
    // A runtime error in the top level has its line too.
    let e = rt
        .load("top.lua", "local a = 1\n\nerror('boom')\n")
        .unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("boom"), "{}", e.message);
}

#[test]
fn missing_function_refused() {
    let rt = runtime("function here(pkt) end\nnot_a_function = 3\n");
    assert!(rt.function("here").is_ok());
    let e = rt.function("absent").unwrap_err();
    assert_eq!(e.chunk, "absent");
    assert!(e.message.contains("not defined"), "{}", e.message);
    let e = rt.function("not_a_function").unwrap_err();
    assert!(e.message.contains("a integer"), "{}", e.message);
    // The same function looked up twice is the same id.
    assert_eq!(rt.function("here").unwrap(), rt.function("here").unwrap());
}

#[test]
fn fields_read_exactly() {
    // The values go back to Rust byte for byte as a packet queued with pkt:send.
    let mut rt = runtime(
        r#"
        function read(pkt)
          local got = { pkt.len, pkt.outgoing, pkt.ptype, pkt.l7, pkt.host, pkt.l4proto,
                  pkt.sport, pkt.dport, pkt.ttl, pkt.tcp_flags, pkt.seq, pkt.ack, pkt.payload,
                  pkt.n, pkt.d, pkt.b, pkt.s, pkt.rn, pkt.rd, pkt.rb, pkt.rs,
                  pkt:byte(1), pkt:byte(10), pkt:byte(0), pkt:byte(46), pkt:bytes(13, 16),
                  pkt.payload_offset, pkt.modified, pkt.nosuchfield }
          local out = {}
          for i = 1, 29 do out[i] = tostring(got[i]) end
          pkt:send(table.concat(out, "|"))
        end
        "#,
    );
    let f = rt.function("read").unwrap();
    let mut v = view(b"hello");
    let before = v.clone();
    let r = rt.call(f, &mut v, FlowId(1), &[]);
    assert_eq!((r.verdict, &r.error), (Verdict::Pass, &None));
    assert_eq!(v, before);
    let mut want = format!(
        "45|true|tls_client_hello|tls|example.com|6|40000|443|57|24|{}|{}|hello|3|1|517|1|2|0|0|0|69|6|nil|nil|",
        0x1122_3344u32, 0x5566_7788u32
    )
    .into_bytes();
    want.extend_from_slice(&[10, 0, 0, 1]);
    want.extend_from_slice(b"|40|false|nil");
    assert_eq!(r.send.len(), 1);
    assert_eq!(
        String::from_utf8_lossy(&r.send[0]),
        String::from_utf8_lossy(&want)
    );
    assert_eq!(r.send[0], want);

    // A UDP packet: no TCP fields; unknown l7 and host are nil.
    let mut u = PacketView::new(Builder::raw().udp(SRC, DST, 5353, 53, b"q"), false);
    let r = rt.call(f, &mut u, FlowId(2), &[]);
    let want =
        "29|false|unknown|nil|nil|17|5353|53|64|nil|nil|nil|q|0|0|0|0|0|0|0|0|69|17|nil|nil|";
    assert_eq!(&r.send[0][..want.len()], want.as_bytes());
}

#[test]
fn verdicts_from_return_values() {
    let mut rt = runtime(
        r#"
        function v_nil(pkt) end
        function v_pass(pkt) return "pass" end
        function v_modify(pkt) return "modify" end
        function v_drop(pkt) return "drop" end
        function n_pass(pkt) return VERDICT_PASS end
        function n_modify(pkt) return VERDICT_MODIFY end
        function n_drop(pkt) return VERDICT_DROP + VERDICT_PRESERVE_NEXT end
        function m_drop(pkt) pkt:drop() return "pass" end
        function bad(pkt) return "maybe" end
        "#,
    );
    let cases = [
        ("v_nil", Verdict::Pass),
        ("v_pass", Verdict::Pass),
        ("v_modify", Verdict::Modify),
        ("v_drop", Verdict::Drop),
        ("n_pass", Verdict::Pass),
        ("n_modify", Verdict::Modify),
        ("n_drop", Verdict::Drop),
        ("m_drop", Verdict::Drop),
    ];
    for (name, want) in cases {
        let f = rt.function(name).unwrap();
        let r = rt.call(f, &mut view(b"x"), FlowId(1), &[]);
        assert_eq!((name, r.verdict, r.error), (name, want, None));
    }
    let f = rt.function("bad").unwrap();
    let r = rt.call(f, &mut view(b"x"), FlowId(1), &[]);
    assert_eq!(r.verdict, Verdict::Pass);
    assert_eq!(
        r.error,
        Some(CallError::BadReturn(
            "returned \"maybe\", not a verdict".into()
        ))
    );
    assert_eq!(rt.stats().last().unwrap().1.errors, 1);
}

#[test]
fn set_byte_modifies() {
    let mut rt = runtime("function f(pkt) pkt:set_byte(pkt.payload_offset + 1, 0x48) end");
    let f = rt.function("f").unwrap();
    let mut v = view(b"hello");
    let r = rt.call(f, &mut v, FlowId(1), &[]);
    assert_eq!(r.verdict, Verdict::Modify);
    assert_eq!(r.error, None);
    assert!(v.modified);
    let mut want = tcp_packet(b"hello");
    want[40] = b'H';
    assert_eq!(v.packet, want);
}

#[test]
fn set_payload_fixes_lengths_and_checksums() {
    let mut rt = runtime(r#"function f(pkt) pkt:set_payload("HELLO, WORLD") end"#);
    let f = rt.function("f").unwrap();
    let mut v = view(b"hello");
    let r = rt.call(f, &mut v, FlowId(1), &[]);
    assert_eq!(r.verdict, Verdict::Modify);
    assert_eq!(v.packet, tcp_packet(b"HELLO, WORLD"));
}

#[test]
fn set_payload_ipv6_udp() {
    let (src, dst): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (
        "2001:db8::1".parse().unwrap(),
        "2001:db8::2".parse().unwrap(),
    );
    let mut rt = runtime(r#"function f(pkt) pkt:set_payload(pkt.payload .. "-longer") end"#);
    let f = rt.function("f").unwrap();
    let mut v = PacketView::new(Builder::raw().udp(src, dst, 5000, 53, b"query"), true);
    assert_eq!((v.l4proto, v.l4_offset, v.payload_offset), (17, 40, 48));
    let r = rt.call(f, &mut v, FlowId(1), &[]);
    assert_eq!((r.verdict, r.error), (Verdict::Modify, None));
    assert_eq!(
        v.packet,
        Builder::raw().udp(src, dst, 5000, 53, b"query-longer")
    );
}

#[test]
fn failing_call_restores_the_packet() {
    let mut rt = runtime(
        "function f(pkt) pkt:set_byte(1, 0) pkt:set_payload('xyz') pkt:send('s') pkt:cutoff() error('late') end",
    );
    let f = rt.function("f").unwrap();
    let mut v = view(b"hello");
    let before = v.clone();
    let r = rt.call(f, &mut v, FlowId(1), &[]);
    assert_eq!(r.verdict, Verdict::Pass);
    assert_eq!(r.send, Vec::<Vec<u8>>::new());
    assert!(!r.cutoff);
    let Some(CallError::Script(msg)) = r.error else {
        panic!("{:?}", r.error)
    };
    assert_eq!(msg, "test.lua:1: late");
    assert_eq!(v, before);
}

#[test]
fn send_and_cutoff() {
    let mut rt = runtime(
        r#"
        function f(pkt)
          pkt:send("\1\2\3")
          pkt:send(pkt:bytes(1, 20))
          if pkt.n >= 3 then pkt:cutoff() end
        end
        function g(pkt) end
        "#,
    );
    let f = rt.function("f").unwrap();
    let mut v = view(b"abc");
    let r = rt.call(f, &mut v, FlowId(1), &[]);
    assert_eq!(r.verdict, Verdict::Pass);
    assert!(r.cutoff);
    assert_eq!(
        r.send,
        vec![vec![1, 2, 3], tcp_packet(b"abc")[..20].to_vec()]
    );
    // Nothing carries over to the next call.
    let g = rt.function("g").unwrap();
    let r = rt.call(g, &mut v, FlowId(1), &[]);
    assert!(!r.cutoff);
    assert!(r.send.is_empty());
    // At most MAX_SEND packets per call.
    rt.load(
        "many.lua",
        "function many(pkt) for i = 1, 65 do pkt:send('x') end end",
    )
    .unwrap();
    let m = rt.function("many").unwrap();
    let r = rt.call(m, &mut v, FlowId(1), &[]);
    assert!(
        matches!(r.error, Some(CallError::Script(_))),
        "{:?}",
        r.error
    );
    assert!(r.send.is_empty());
}

#[test]
fn args_reach_the_function() {
    let mut rt = runtime(
        "function f(pkt, args) if args.pos == '2' and args.x == nil then return 'drop' end end",
    );
    let f = rt.function("f").unwrap();
    let args = vec![("pos".to_string(), "2".to_string())];
    for _ in 0..2 {
        let r = rt.call(f, &mut view(b"a"), FlowId(1), &args);
        assert_eq!((r.verdict, r.error), (Verdict::Drop, None));
    }
    // No args: nil, indexing it is an error.
    let r = rt.call(f, &mut view(b"a"), FlowId(1), &[]);
    assert!(matches!(r.error, Some(CallError::Script(_))));
}

#[test]
fn flow_state_persists_and_forget_clears() {
    let mut rt = runtime(
        r#"
        function count(pkt)
          local st = pkt.state
          st.n = (st.n or 0) + 1
          if st.n == 3 then return "drop" end
        end
        "#,
    );
    let f = rt.function("count").unwrap();
    let verdicts = |rt: &mut Runtime, flow| {
        (0..3)
            .map(|_| rt.call(f, &mut view(b"a"), FlowId(flow), &[]).verdict)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        verdicts(&mut rt, 7),
        [Verdict::Pass, Verdict::Pass, Verdict::Drop]
    );
    // Another flow has its own state.
    assert_eq!(
        verdicts(&mut rt, 8),
        [Verdict::Pass, Verdict::Pass, Verdict::Drop]
    );
    assert_eq!(rt.flow_stats().live, 2);
    rt.forget(FlowId(7));
    assert_eq!(rt.flow_stats().live, 1);
    assert_eq!(
        verdicts(&mut rt, 7),
        [Verdict::Pass, Verdict::Pass, Verdict::Drop]
    );
}

#[test]
fn max_flows_evicts_least_recently_used() {
    let cfg = LuaConfig {
        max_flows: 2,
        ..LuaConfig::default()
    };
    let mut rt = Runtime::new(&cfg).unwrap();
    rt.load(
        "t.lua",
        "function f(pkt) local st = pkt.state st.n = (st.n or 0) + 1 return st.n end",
    )
    .unwrap();
    let f = rt.function("f").unwrap();
    // Returns n: 1 = VERDICT_MODIFY, 2 = VERDICT_DROP, 3 = a bad verdict.
    let mut call = |flow| rt.call(f, &mut view(b"a"), FlowId(flow), &[]).verdict;
    assert_eq!(call(1), Verdict::Modify);
    assert_eq!(call(2), Verdict::Modify);
    assert_eq!(call(1), Verdict::Drop); // flow 1 is now the most recent
    assert_eq!(call(3), Verdict::Modify); // evicts flow 2
    assert_eq!(call(1), Verdict::Pass); // n = 3: bad verdict, still kept
    assert_eq!(call(2), Verdict::Modify); // flow 2 starts over; evicts flow 3
    let s = rt.flow_stats();
    assert_eq!((s.live, s.evicted, s.refused), (2, 2, 0));

    let mut rt = Runtime::new(&LuaConfig {
        max_flows: 0,
        ..LuaConfig::default()
    })
    .unwrap();
    rt.load(
        "t.lua",
        "function f(pkt) if pkt.state == nil then return 'drop' end end",
    )
    .unwrap();
    let f = rt.function("f").unwrap();
    assert_eq!(
        rt.call(f, &mut view(b"a"), FlowId(1), &[]).verdict,
        Verdict::Drop
    );
    assert_eq!(rt.flow_stats().refused, 1);
}
