//! `ct timeout` and `ct expectation` objects through `Stateful`, as the kernel's
//! `nft_ct_timeout_obj_eval` and `nft_ct_expect_obj_eval` apply them: a new connection given a
//! policy times out by it (other connections by the defaults); a connection that set an
//! expectation sees its peer's connection to the port `related` (once), others `new`; the
//! expectation rule stops for a packet of a confirmed connection.

use std::net::Ipv4Addr;
use weir_conntrack::Config;
use weir_engine::stateful::Stateful;
use weir_engine::{Compiled, Decision, Engine, Mode};
use weir_wire::build::{Builder, Tcp};

mod common;

const C: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const S: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 20);
const SEC: u64 = 1_000_000_000;

fn stateful(rules: &str) -> Stateful {
    let (rs, _) = weir_lang::load_str("t.nft", rules).unwrap_or_else(|(sm, d)| {
        panic!("{}", weir_lang::diag::render_all(&d, &sm));
    });
    assert!(rs.refuse_unevaluated().is_ok(), "{:?}", rs.unevaluated());
    Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        Config::default(),
    )
}

/// A packet forwarded from `lan0` to `wan0`, then confirmed (its connection's helper
/// reading it); its mark as it leaves.
fn forward(sf: &mut Stateful, frame: &[u8], now_ns: u64) -> u32 {
    let (mark, d) = common::forward_via(sf, "lan0", "wan0", frame, now_ns);
    assert_eq!(d, Decision::Accept);
    mark
}

const RULES: &str = r#"table ip f {
    ct timeout short-udp { protocol udp; l3proto ip; policy = { unreplied : 5s, replied : 7s } }
    ct expectation back { protocol tcp; dport 6000; timeout 1m; size 2; }
    chain pre {
        type filter hook prerouting priority 0; policy accept;
        udp dport 53 ct timeout set "short-udp"
        tcp dport 21 ct expectation set "back" meta mark set 0x10
    }
    chain fwd {
        type filter hook forward priority 0; policy accept;
        ct state new meta mark set mark | 0x1
        ct state related meta mark set mark | 0x2
        ct state established meta mark set mark | 0x4
    }
}"#;

/// The seconds left of each connection, by destination port.
fn remaining(sf: &Stateful, now: u64) -> Vec<(u16, u64)> {
    let mut v: Vec<(u16, u64)> = sf
        .ct()
        .iter()
        .map(|(id, e)| {
            let t = sf.ct().tuple(id, weir_conntrack::Dir::Original).unwrap();
            (
                t.dport,
                (e.timeout_remaining(now).as_millis() as u64 + 500) / 1000,
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_timeout_policy_times_its_connections_out() {
    let mut sf = stateful(RULES);
    let q = Builder::new().udp(C, S, 1000, 53, b"q");
    let other = Builder::new().udp(C, S, 1000, 54, b"q");
    assert_eq!(forward(&mut sf, &q, 0), 0x1);
    assert_eq!(forward(&mut sf, &other, 0), 0x1);
    assert_eq!(sf.stats().ct_timeout_set, 1);
    assert_eq!(remaining(&sf, 0), vec![(53, 5), (54, 30)]);
    // replied: the policy's 7 s (once the stream timeout applies), the default 120 s
    let a = Builder::new().udp(S, C, 53, 1000, b"a");
    let b = Builder::new().udp(S, C, 54, 1000, b"a");
    assert_eq!(forward(&mut sf, &a, SEC), 0x4);
    assert_eq!(forward(&mut sf, &b, SEC), 0x4);
    assert_eq!(forward(&mut sf, &q, 3 * SEC), 0x4);
    assert_eq!(forward(&mut sf, &other, 3 * SEC), 0x4);
    assert_eq!(remaining(&sf, 3 * SEC), vec![(53, 7), (54, 120)]);
    // 8 s later the policy's connection is gone: its next packet starts a new one
    assert_eq!(forward(&mut sf, &q, 11 * SEC), 0x1, "new again");
    assert_eq!(forward(&mut sf, &other, 11 * SEC), 0x4);
}

#[test]
fn an_expectation_object_makes_the_peers_connection_related() {
    let mut sf = stateful(RULES);
    let syn = Builder::new().tcp(C, S, &Tcp::new(40000, 21, 0x02).seq(1), b"");
    assert_eq!(
        forward(&mut sf, &syn, 0),
        0x11,
        "new, and the expectation rule ran"
    );
    // a retransmitted SYN: the connection is confirmed, the rule stops before its mark
    assert_eq!(forward(&mut sf, &syn, 1), 0x1);
    let back = |sport| Builder::new().tcp(S, C, &Tcp::new(sport, 6000, 0x02).seq(9), b"");
    assert_eq!(forward(&mut sf, &back(2000), 2), 0x2, "related");
    // once: the next connection to the port is new
    let other = Builder::new().tcp(S, C, &Tcp::new(2001, 6000, 0x02).seq(9), b"");
    assert_eq!(forward(&mut sf, &other, 3), 0x1);
    // from another host, or after the timeout: new
    let syn2 = Builder::new().tcp(C, S, &Tcp::new(40001, 21, 0x02).seq(1), b"");
    assert_eq!(forward(&mut sf, &syn2, 4), 0x11);
    let stranger = Builder::new().tcp(
        Ipv4Addr::new(198, 19, 0, 99),
        C,
        &Tcp::new(2002, 6000, 0x02).seq(9),
        b"",
    );
    assert_eq!(forward(&mut sf, &stranger, 5), 0x1);
    assert_eq!(forward(&mut sf, &back(2003), 61 * SEC), 0x1, "expired");
}

/// `ct label set N` adds bit N to the connection's labels (kept when it is confirmed, seen by
/// its later packets both ways); `ct label N` tests the bit, `ct label != N` its absence.
#[test]
fn labels_set_on_the_first_packet_are_read_by_later_ones() {
    let rules = r#"table ip f {
    chain fwd {
        type filter hook forward priority 0; policy accept;
        tcp dport 22 ct label set 5
        ct label 5 meta mark set mark | 0x1
        ct label != 5 meta mark set mark | 0x2
        ct label 127 meta mark set mark | 0x4
        ct state established tcp sport 22 ct label set 127
    }
}"#;
    let mut sf = stateful(rules);
    let syn = Builder::new().tcp(C, S, &Tcp::new(40000, 22, 0x02).seq(1), b"");
    assert_eq!(
        forward(&mut sf, &syn, 0),
        0x1,
        "set, then read in the same chain"
    );
    let other = Builder::new().tcp(C, S, &Tcp::new(40000, 80, 0x02).seq(1), b"");
    assert_eq!(forward(&mut sf, &other, 0), 0x2);
    let sa = Builder::new().tcp(S, C, &Tcp::new(22, 40000, 0x12).seq(7).ack(2), b"");
    assert_eq!(forward(&mut sf, &sa, 1), 0x1, "the reply sees the label");
    // the reply added label 127: the next packet sees both
    let a = Builder::new().tcp(C, S, &Tcp::new(40000, 22, 0x10).seq(2).ack(8), b"");
    assert_eq!(forward(&mut sf, &a, 2), 0x1 | 0x4);
}

/// `ct helper set tcp dport map { ... }` gives a new connection the helper object the map
/// picks for it (a port not in the map: the rule stops, no helper); `ct helper "ftp"` reads
/// the connection's helper by name, the rule stops for a connection without one (as
/// nft_ct_get_eval breaks); the expectation the FTP helper records makes the data
/// connection related.
#[test]
fn helper_maps_and_the_helper_key() {
    let rules = r#"table ip f {
    ct helper ftp-std { type "ftp" protocol tcp; }
    chain pre {
        type filter hook prerouting priority 0; policy accept;
        ct helper set tcp dport map { 21 : "ftp-std", 2121 : "ftp-std" }
    }
    chain fwd {
        type filter hook forward priority 0; policy accept;
        ct helper "ftp" meta mark set mark | 0x1
        ct helper != "ftp" meta mark set mark | 0x2
        ct state related meta mark set mark | 0x4
        ct state established meta mark set mark | 0x8
    }
}"#;
    let mut sf = stateful(rules);
    // a control connection on 2121 (the map's second element): the helper is the object's
    let syn = Builder::new().tcp(C, S, &Tcp::new(40000, 2121, 0x02).seq(1), b"");
    assert_eq!(
        forward(&mut sf, &syn, 0),
        0x1,
        "the helper set in prerouting"
    );
    let sa = Builder::new().tcp(S, C, &Tcp::new(2121, 40000, 0x12).seq(7).ack(2), b"");
    assert_eq!(forward(&mut sf, &sa, 1), 0x9, "the reply: the same helper");
    // a port the map does not have: no helper, and `ct helper` stops both rules
    let web = Builder::new().tcp(C, S, &Tcp::new(40001, 80, 0x02).seq(1), b"");
    assert_eq!(forward(&mut sf, &web, 2), 0);
    // the FTP helper reads the PORT command and expects the data connection
    let a = Builder::new().tcp(C, S, &Tcp::new(40000, 2121, 0x10).seq(2).ack(8), b"");
    assert_eq!(forward(&mut sf, &a, 3), 0x9);
    let port = Builder::new().tcp(
        C,
        S,
        &Tcp::new(40000, 2121, 0x18).seq(2).ack(8),
        b"PORT 198,18,0,10,78,32\r\n",
    );
    assert_eq!(forward(&mut sf, &port, 4), 0x9);
    let data = Builder::new().tcp(S, C, &Tcp::new(20, 20000, 0x02).seq(50), b"");
    assert_eq!(
        forward(&mut sf, &data, 5),
        0x4,
        "related, without a helper of its own"
    );
}

/// `ct id` is one value for all of a connection's packets, both ways (the same as its first
/// packet stored in the connection's mark), and another for another connection.
#[test]
fn a_connection_keeps_its_id() {
    let rules = r#"table ip f {
    chain post {
        type filter hook postrouting priority 0; policy accept;
        ct state new ct mark set ct id
        meta mark set ct id
    }
}"#;
    let mut sf = stateful(rules);
    let syn = Builder::new().tcp(C, S, &Tcp::new(40000, 22, 0x02).seq(1), b"");
    let id = forward(&mut sf, &syn, 0);
    let sa = Builder::new().tcp(S, C, &Tcp::new(22, 40000, 0x12).seq(7).ack(2), b"");
    assert_eq!(forward(&mut sf, &sa, 1), id, "the reply");
    let a = Builder::new().tcp(C, S, &Tcp::new(40000, 22, 0x10).seq(2).ack(8), b"");
    assert_eq!(forward(&mut sf, &a, 2), id);
    let other = Builder::new().tcp(C, S, &Tcp::new(40001, 22, 0x02).seq(1), b"");
    let id2 = forward(&mut sf, &other, 3);
    assert_ne!(id, id2);
    let mut marks: Vec<u32> = sf.ct().iter().map(|(_, e)| e.mark).collect();
    marks.sort();
    let mut want = vec![id, id2];
    want.sort();
    assert_eq!(marks, want, "the first packet's id is the connection's");
}
