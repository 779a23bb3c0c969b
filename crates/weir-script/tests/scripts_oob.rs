//! `oob` through the engine and `Scripts`: the client's numbers shifted down by one from its
//! SYN, the server's acknowledgements up by one until the data, the first data sent with one
//! urgent byte in front (URG, the urgent pointer 0) in place of the original, and nothing
//! touched after it.

use std::path::Path;
use weir_engine::Decision;
use weir_script::config::ScriptsConfig;
use weir_script::Scripts;

mod scripts_common;
use scripts_common::*;

const RULES: &str = "table inet z {
  chain post {
    type filter hook postrouting priority 101;
    tcp dport 443 queue num 200
    tcp sport 443 queue num 200
  }
}
";

fn setup(desync: &str) -> weir_engine::stateful::Stateful {
    let mut sf = engine(RULES);
    let cfg: ScriptsConfig = serde_json::from_str(&format!(
        r#"{{"profile": [{{"queue": 200, "instance": [
            {{"desync": "{desync}", "in_range": "-s1", "out_range": "a"}}]}}]}}"#
    ))
    .unwrap();
    sf.set_flow_hook(Some(Box::new(Scripts::new(&cfg, Path::new("/")).unwrap())));
    sf
}

/// (seq, ack, flags, urgent pointer) of the IPv4/TCP packet of an Ethernet frame or an IP
/// packet.
fn tcp_of(p: &[u8]) -> (u32, u32, u8, u16) {
    let ip = if p[0] >> 4 == 4 { p } else { &p[14..] };
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let t = &ip[ihl..];
    let r = |i: usize| u32::from_be_bytes(t[i..i + 4].try_into().unwrap());
    (r(4), r(8), t[13], u16::from_be_bytes([t[18], t[19]]))
}

#[test]
fn oob_shifts_the_handshake_and_slips_one_urgent_byte_into_the_first_data() {
    let mut sf = setup("oob");
    // the SYN: one less
    let (d, out, sent) = forward(&mut sf, tcp(0x02, ISN - 1, b"", true));
    assert_eq!((d, sent.len()), (Decision::Accept, 0));
    assert_eq!(tcp_of(&out).0, ISN - 2);
    // the server's SYN,ACK: its acknowledgement one more
    let synack = tcp(0x12, 7, b"", false);
    let ack0 = tcp_of(&synack).1;
    let (d, out, _) = forward(&mut sf, synack);
    assert_eq!(d, Decision::Accept);
    assert_eq!(tcp_of(&out).1, ack0 + 1);
    // the client's ACK: one less
    let (_, out, _) = forward(&mut sf, tcp(0x10, ISN, b"", true));
    assert_eq!(tcp_of(&out).0, ISN - 1);
    // the first data: dropped, sent again with the urgent byte in front
    let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN, b"hello", true));
    assert!(!d.is_accept(), "{d:?}");
    assert_eq!(sent.len(), 1);
    let (seq, _, flags, urp) = tcp_of(&sent[0]);
    assert_eq!((seq, flags & 0x20, urp), (ISN - 1, 0x20, 0));
    let (_, _, payload, csum_ok) = seg(&sent[0]);
    assert_eq!(payload, b"\0hello");
    assert!(csum_ok);
    // after it: the numbers agree again, nothing is changed
    let next = tcp(0x18, ISN + 5, b"more", true);
    let (d, out, sent) = forward(&mut sf, next.clone());
    assert_eq!((d, sent.len()), (Decision::Accept, 0));
    assert_eq!(out, next);
    let reply = tcp(0x18, 8, b"ok", false);
    let (_, out, _) = forward(&mut sf, reply.clone());
    assert_eq!(out, reply);
}

#[test]
fn oob_with_a_char_at_the_end_and_not_without_the_syn() {
    let mut sf = setup("oob:char=Z:urp=e");
    for (flags, seq, client) in [(0x02, ISN - 1, true), (0x12, 7, false), (0x10, ISN, true)] {
        forward(&mut sf, tcp(flags, seq, b"", client));
    }
    let (_, _, sent) = forward(&mut sf, tcp(0x18, ISN, b"abc", true));
    assert_eq!(sent.len(), 1);
    assert_eq!(tcp_of(&sent[0]).3, 4);
    assert_eq!(seg(&sent[0]).2, b"abcZ");
    // a connection first seen after its SYN: left alone
    let mut sf = setup("oob");
    let data = tcp(0x18, ISN, b"hello", true);
    let (d, out, sent) = forward(&mut sf, data.clone());
    assert_eq!((d, sent.len()), (Decision::Accept, 0));
    assert_eq!(out, data);
}

#[test]
fn oob_arguments_are_checked() {
    for bad in ["oob:char=ab", "oob:urp=nowhere", "oob:byte=300"] {
        let cfg: ScriptsConfig = serde_json::from_str(&format!(
            r#"{{"profile": [{{"queue": 200, "instance": [{{"desync": "{bad}"}}]}}]}}"#
        ))
        .unwrap();
        assert!(
            Scripts::new(&cfg, Path::new("/")).is_err(),
            "{bad} accepted"
        );
    }
}
