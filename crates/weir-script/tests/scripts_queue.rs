//! Per-flow scripts behind `queue`, end to end through the engine: a ruleset queues a
//! client's TLS connection, `Scripts` (the queue's listener) runs nfqws2's seed profile as
//! native actions (`multisplit` then a `fake` with TTL 1 and a bad checksum) on the
//! ClientHello, and later packets cost a bit test once the range is past.

use std::path::Path;
use weir_engine::stateful::Stateful;
use weir_engine::{Decision, DropReason};
use weir_script::config::ScriptsConfig;
use weir_script::Scripts;

mod scripts_common;
use scripts_common::*;

fn hello() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/zapret2/files/fake/tls_clienthello_iana_org.bin"
    ))
    .expect("../shared/zapret2's fake payloads")
}

fn config(json: &str) -> ScriptsConfig {
    serde_json::from_str(json).unwrap()
}

fn setup(cfg: &str) -> Stateful {
    let mut sf = engine(RULES);
    let s = Scripts::new(&config(cfg), Path::new("/")).unwrap();
    sf.set_flow_hook(Some(Box::new(s)));
    sf
}

/// SYN, SYN+ACK (not queued: the rule takes dport 443), ACK: each accepted, nothing sent.
fn handshake(sf: &mut Stateful) {
    for (flags, seq, client) in [(0x02, ISN - 1, true), (0x12, 7, false), (0x10, ISN, true)] {
        let (d, _, sent) = forward(sf, tcp(flags, seq, b"", client));
        assert_eq!(
            (d, sent.len()),
            (Decision::Accept, 0),
            "flags {flags:#x}: {sent:?}"
        );
    }
}

const SEED: &str = r#"{"profile": [{"queue": 200, "name": "seed", "filter_tcp": "443",
  "instance": [
    {"desync": "multisplit:payload=all", "out_range": "-n4"},
    {"desync": "fake:ip_ttl=1:badsum:blob=0x10000000:payload=all", "out_range": "-n4"}
  ]}]}"#;

#[test]
fn seed_profile_splits_the_client_hello_and_sends_a_fake_first() {
    let mut sf = setup(SEED);
    let h = hello();
    // the handshake: no payload, nothing to split; weir's fake sends nothing on an empty
    // packet (nfqws2's, with payload=all, would send one: to settle against nfqws2 itself)
    handshake(&mut sf);
    let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN, &h, true));
    // multisplit at its default position 2: the original dropped, two segments sent, then
    // the fake
    assert_eq!(d, Decision::Drop(DropReason::Queue(200)));
    assert_eq!(sent.len(), 3, "{sent:?}");
    let (s1, t1, p1, ok1) = seg(&sent[0]);
    let (s2, t2, p2, ok2) = seg(&sent[1]);
    let (s3, t3, p3, ok3) = seg(&sent[2]);
    assert_eq!((s1, s2), (ISN, ISN + p1.len() as u32));
    assert_eq!(
        [p1, p2].concat(),
        h,
        "the segments carry the ClientHello whole"
    );
    assert!(ok1 && ok2 && t1 == 64 && t2 == 64);
    assert_eq!((s3, t3, p3, ok3), (ISN, 1, vec![0x10, 0, 0, 0], false));
}

#[test]
fn past_the_range_a_direction_costs_a_bit_test() {
    let mut sf = setup(SEED);
    handshake(&mut sf);
    // the handshake's two client packets were n1 and n2; the range ends at n4
    for i in 0..6u32 {
        let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN + 4 * i, b"data", true));
        if i < 2 {
            // split at 2 (two segments, the original dropped) and a fake
            assert_eq!(
                (d, sent.len()),
                (Decision::Drop(DropReason::Queue(200)), 3),
                "packet {i}"
            );
        } else {
            assert_eq!((d, sent.len()), (Decision::Accept, 0), "packet {i}");
        }
    }
}

#[test]
fn hostlists_choose_the_profile_once_the_sni_is_known() {
    let cfg = r#"{"profile": [
      {"queue": 200, "name": "listed", "filter_tcp": "443", "hostlist": ["iana.org"],
       "instance": [{"desync": "multidisorder:pos=host", "out_range": "-n9"}]},
      {"queue": 200, "name": "other", "filter_tcp": "443",
       "instance": [{"desync": "fake:blob=0x00", "out_range": "-n1"}]}
    ]}"#;
    let mut sf = setup(cfg);
    let h = hello();
    handshake(&mut sf);
    let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN, &h, true));
    assert_eq!(d, Decision::Drop(DropReason::Queue(200)));
    // multidisorder at the host: the second part first
    let at = h.windows(8).position(|w| w == b"iana.org").unwrap();
    let parts: Vec<_> = sent.iter().map(|p| seg(p)).collect();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!((parts[0].0, parts[1].0), (ISN + at as u32, ISN));
    assert_eq!([parts[1].2.clone(), parts[0].2.clone()].concat(), h);
}

#[test]
fn configuration_errors_name_the_profile_and_instance() {
    for (cfg, want) in [
        (
            r#"{"profile": [{"queue": 1, "name": "p", "instance": [{"desync": "nosuch"}]}]}"#,
            "nosuch",
        ),
        (
            r#"{"profile": [{"queue": 1, "name": "p", "instance": [{"desync": "multisplit:pos=zz"}]}]}"#,
            "pos",
        ),
        (
            r#"{"profile": [{"queue": 1, "name": "p", "instance": [{"desync": "fake:blob=0x00", "out_range": "n9-n2"}]}]}"#,
            "range",
        ),
        (
            r#"{"profile": [{"queue": 1, "name": "p", "instance": [{"desync": "fake:payload=bogus"}]}]}"#,
            "bogus",
        ),
        (
            r#"{"profile": [{"queue": 1, "name": "p", "instance": [{"desync": "fake:dir=up"}]}]}"#,
            "dir",
        ),
        (r#"{"blobs": {"b": "nothex"}}"#, "blob b"),
        (r#"{"lua": ["x.lua"]}"#, "Lua"),
    ] {
        let e = Scripts::new(&config(cfg), Path::new("/"))
            .err()
            .unwrap_or_default();
        assert!(e.contains(want), "{cfg}: {e}");
    }
}
