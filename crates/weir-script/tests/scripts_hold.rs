//! A ClientHello over two TCP segments, through the engine and `Scripts`: its first part is
//! held (dropped where it comes, kept), and when the second completes it the instances act
//! on one packet with the whole hello: `multisplit` at `midsld` cuts the name wherever the
//! client's segments cut it, and a host list learnt from the whole chooses the profile.
//! When nothing acts on the whole, the parts go on as they came; when the client sends a
//! held part again, holding stops and the parts go on.

use std::path::Path;
use weir_engine::stateful::Stateful;
use weir_engine::Decision;
use weir_script::config::ScriptsConfig;
use weir_script::Scripts;

mod scripts_common;
use scripts_common::*;

fn hello() -> Option<Vec<u8>> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/zapret2/files/fake/tls_clienthello_iana_org.bin"
    );
    match std::fs::read(p) {
        Ok(h) => Some(h),
        Err(e) => {
            eprintln!("SKIP: {p}: {e} (../shared/zapret2 is not beside the checkout)");
            None
        }
    }
}

fn setup(cfg: &str) -> Stateful {
    let mut sf = engine(RULES);
    let cfg: ScriptsConfig = serde_json::from_str(cfg).unwrap();
    sf.set_flow_hook(Some(Box::new(Scripts::new(&cfg, Path::new("/")).unwrap())));
    sf
}

/// The IP packet of an Ethernet frame built by `tcp`.
fn ip_of(frame: &[u8]) -> Vec<u8> {
    frame[14..].to_vec()
}

/// Where the hello is cut: inside "iana.org", so no segment carries the name whole.
fn cut(h: &[u8]) -> usize {
    h.windows(8).position(|w| w == b"iana.org").unwrap() + 3
}

const SPLIT: &str = r#"{"profile": [
  {"queue": 200, "name": "other", "filter_tcp": "443", "hostlist": ["example.com"],
   "instance": [{"desync": "multisplit:pos=1"}]},
  {"queue": 200, "name": "iana", "filter_tcp": "443", "hostlist": ["iana.org"],
   "instance": [{"desync": "multisplit:pos=midsld"}]}]}"#;

#[test]
fn a_hello_over_two_segments_is_held_and_split_as_one() {
    let Some(h) = hello() else { return };
    let mut sf = setup(SPLIT);
    handshake_at(&mut sf, 1_000);
    let c = cut(&h);
    // the first part: held (dropped here), nothing sent
    let (d, _, sent) = forward(&mut sf, tcp(0x10, ISN, &h[..c], true));
    assert!(!d.is_accept(), "the first part should be held: {d:?}");
    assert!(sent.is_empty(), "{sent:?}");
    // the second: the whole hello split at midsld ("iana" + ".org": mid of "iana"), this
    // part dropped too
    let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN + c as u32, &h[c..], true));
    assert!(!d.is_accept(), "{d:?}");
    let segs: Vec<_> = sent
        .iter()
        .map(|p| seg(p))
        .map(|(q, _, p, ok)| (q, p, ok))
        .collect();
    assert_eq!(segs.len(), 2, "{segs:?}");
    let name = h.windows(8).position(|w| w == b"iana.org").unwrap();
    let midsld = name + 2;
    assert_eq!(segs[0].0, ISN);
    assert_eq!(segs[0].1, h[..midsld]);
    assert_eq!(segs[1].0, ISN + midsld as u32);
    assert_eq!(segs[1].1, h[midsld..]);
    assert!(segs.iter().all(|s| s.2), "checksums");
    // a later packet of the flow passes as it is
    let (d, _, sent) = forward(&mut sf, tcp(0x10, ISN + h.len() as u32, b"", true));
    assert_eq!((d, sent.len()), (Decision::Accept, 0));
}

#[test]
fn parts_go_on_as_they_came_when_nothing_acts_on_the_whole() {
    let Some(h) = hello() else { return };
    // the only profile takes another host: nothing acts on iana.org's hello
    let mut sf = setup(
        r#"{"profile": [{"queue": 200, "filter_tcp": "443", "hostlist": ["example.com"],
           "instance": [{"desync": "multisplit:pos=1"}]}]}"#,
    );
    handshake_at(&mut sf, 1_000);
    let c = cut(&h);
    let first = tcp(0x10, ISN, &h[..c], true);
    let (d, _, sent) = forward(&mut sf, first.clone());
    assert!(!d.is_accept() && sent.is_empty(), "{d:?} {sent:?}");
    let second = tcp(0x18, ISN + c as u32, &h[c..], true);
    let (d, out, sent) = forward(&mut sf, second.clone());
    // the held part sent as it came, then this one accepted unchanged
    assert_eq!(d, Decision::Accept);
    assert_eq!(sent, vec![ip_of(&first)]);
    assert_eq!(out, second);
}

#[test]
fn a_held_part_sent_again_ends_the_hold() {
    let Some(h) = hello() else { return };
    let mut sf = setup(SPLIT);
    handshake_at(&mut sf, 1_000);
    let c = cut(&h);
    let first = tcp(0x10, ISN, &h[..c], true);
    let (d, _, sent) = forward(&mut sf, first.clone());
    assert!(!d.is_accept() && sent.is_empty());
    // the client retransmits the first part (the rest never came): the held copy goes, and
    // this one passes (no profile yet: the host is not known)
    let (d, _, sent) = forward(&mut sf, first.clone());
    assert_eq!(d, Decision::Accept);
    assert_eq!(sent, vec![ip_of(&first)]);
    // the rest then passes unheld
    let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN + c as u32, &h[c..], true));
    assert_eq!((d, sent.len()), (Decision::Accept, 0));
}

#[test]
fn a_whole_hello_in_one_segment_is_not_held() {
    let Some(h) = hello() else { return };
    let mut sf = setup(SPLIT);
    handshake_at(&mut sf, 1_000);
    let (d, _, sent) = forward(&mut sf, tcp(0x18, ISN, &h, true));
    assert!(!d.is_accept());
    assert_eq!(sent.len(), 2);
}

#[test]
fn a_changed_whole_goes_in_segments_no_longer_than_the_parts() {
    let Some(h) = hello() else { return };
    // pktmod changes the packet itself (here its TTL): the whole, changed, is cut again
    let mut sf = setup(
        r#"{"profile": [{"queue": 200, "filter_tcp": "443", "hostlist": ["iana.org"],
           "instance": [{"desync": "pktmod:ip_ttl=5"}]}]}"#,
    );
    handshake_at(&mut sf, 1_000);
    // three parts of at most 200 bytes
    let parts: Vec<(usize, usize)> = (0..h.len())
        .step_by(200)
        .map(|a| (a, (a + 200).min(h.len())))
        .collect();
    assert!(parts.len() >= 3);
    let mut sent = Vec::new();
    for (i, &(a, b)) in parts.iter().enumerate() {
        let (d, _, s) = forward(&mut sf, tcp(0x18, ISN + a as u32, &h[a..b], true));
        assert!(!d.is_accept(), "part {i}: {d:?}");
        if i + 1 < parts.len() {
            assert!(s.is_empty(), "part {i} sent {s:?}");
        }
        sent = s;
    }
    let segs: Vec<_> = sent
        .iter()
        .map(|p| seg(p))
        .map(|(q, _, p, ok)| (q, p, ok))
        .collect();
    assert_eq!(segs.len(), parts.len(), "{segs:?}");
    let mut at = 0;
    for (p, s) in sent.iter().zip(&segs) {
        assert_eq!(p[8], 5, "TTL");
        assert_eq!(s.0, ISN + at as u32);
        assert!(s.1.len() <= 200 && s.2);
        at += s.1.len();
    }
    assert_eq!(
        segs.iter().flat_map(|s| s.1.clone()).collect::<Vec<u8>>(),
        h
    );
}
