//! Conntrack zones (`ct zone set` before conntrack), as Linux keeps them: the zone is part of
//! a connection's identity (one tuple in two zones: two connections), a packet is looked up
//! in its zone, `ct zone` reads it back; `ct original zone set` puts only the original
//! direction in the zone, so replies from outside it (zone 0) find the connection.

use std::net::Ipv4Addr;
use weir_conntrack::Config;
use weir_engine::stateful::Stateful;
use weir_engine::{Compiled, Decision, Engine, Mode};
use weir_wire::build::{Builder, Tcp};

mod common;
use common::forward_via;

const C: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const S: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 20);

const RULES: &str = r#"table ip f {
    chain raw {
        type filter hook prerouting priority raw; policy accept;
        iifname "lan1" ct zone set 1
        iifname "lan2" ct zone set 2
        iifname "lan2" ct zone set 9
        iifname "lan3" ct original zone set 3
    }
    chain fwd {
        type filter hook forward priority 0; policy accept;
        ct state new meta mark set mark | 0x1
        ct state established meta mark set mark | 0x2
        ct zone 1 meta mark set mark | 0x10
        ct zone 2 meta mark set mark | 0x20
        ct zone 3 meta mark set mark | 0x40
        ct original zone 3 ct reply zone 0 meta mark set mark | 0x80
    }
}"#;

fn stateful(mode: Mode) -> Stateful {
    let (rs, _) = weir_lang::load_str("t.nft", RULES).unwrap_or_else(|(sm, d)| {
        panic!("{}", weir_lang::diag::render_all(&d, &sm));
    });
    assert!(rs.refuse_unevaluated().is_ok(), "{:?}", rs.unevaluated());
    Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default())
}

/// A packet forwarded from `iif`: its mark (the confirm point accepting it).
fn forward(sf: &mut Stateful, iif: &str, frame: &[u8], now_ns: u64) -> u32 {
    let (mark, d) = forward_d(sf, iif, frame, now_ns);
    assert_eq!(d, Decision::Accept);
    mark
}

/// [`forward`], with the decision at the confirm point.
fn forward_d(sf: &mut Stateful, iif: &str, frame: &[u8], now_ns: u64) -> (u32, Decision) {
    forward_via(sf, iif, "out0", frame, now_ns)
}

#[test]
fn one_tuple_in_two_zones_is_two_connections() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(mode);
        let syn = Builder::new().tcp(C, S, &Tcp::new(40000, 80, 0x02).seq(1), b"");
        let sa = Builder::new().tcp(S, C, &Tcp::new(80, 40000, 0x12).seq(7).ack(2), b"");
        assert_eq!(forward(&mut sf, "lan1", &syn, 0), 0x11, "{mode:?}");
        // the same SYN in zone 2 (the first `ct zone set` wins: not 9) opens another
        assert_eq!(forward(&mut sf, "lan2", &syn, 1), 0x21);
        assert_eq!(sf.ct().len(), 2);
        // a reply in zone 1 is zone 1's connection's; in the default zone nobody's
        assert_eq!(forward(&mut sf, "lan1", &sa, 2), 0x12);
        assert_eq!(
            forward(&mut sf, "wan0", &sa, 3),
            0,
            "no connection in zone 0"
        );
        let a = Builder::new().tcp(C, S, &Tcp::new(40000, 80, 0x10).seq(2).ack(8), b"");
        assert_eq!(forward(&mut sf, "lan1", &a, 4), 0x12);
        // zone 2's connection never saw a reply: its ACK is not established there
        assert_ne!(forward(&mut sf, "lan2", &a, 5) & 0x2, 0x2);
    }
}

#[test]
fn an_original_direction_zone_takes_replies_from_zone_0() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(mode);
        let syn = Builder::new().tcp(C, S, &Tcp::new(40001, 80, 0x02).seq(1), b"");
        assert_eq!(
            forward(&mut sf, "lan3", &syn, 0),
            0x1 | 0x40 | 0x80,
            "{mode:?}"
        );
        let sa = Builder::new().tcp(S, C, &Tcp::new(80, 40001, 0x12).seq(7).ack(2), b"");
        assert_eq!(forward(&mut sf, "wan0", &sa, 1), 0x2 | 0x40 | 0x80);
        // the same SYN from zone 0 would be another connection, but its reply tuple is the
        // first one's (zone 0 in the reply direction): a clash, dropped at the confirm
        // point as the kernel's nf_ct_resolve_clash drops it for TCP
        let (mark, d) = forward_d(&mut sf, "wan0", &syn, 2);
        assert_eq!(mark, 0x1);
        assert!(!d.is_accept(), "{d:?}");
        assert_eq!(sf.ct().len(), 1);
    }
}

/// A packet with a zone template is not untracked by a later `notrack`, and `ct zone set`
/// after `notrack` tracks the packet after all (the kernel's untracked packet has no
/// conntrack, so the template is set), as `weir lab diff` found against the kernel.
#[test]
fn notrack_and_zones_as_the_kernel_orders_them() {
    let rules = r#"table ip f {
    chain raw {
        type filter hook prerouting priority raw; policy accept;
        tcp dport 22 notrack
        ct zone set 4
        tcp dport 23 notrack
    }
    chain raw2 {
        type filter hook prerouting priority -250; policy accept;
        tcp dport 24 notrack
    }
    chain fwd {
        type filter hook forward priority 0; policy accept;
        ct state untracked meta mark set 0x1
        ct state new ct zone 4 meta mark set 0x2
    }
}"#;
    let (rs, _) = weir_lang::load_str("t.nft", rules).unwrap();
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default());
        for port in [22, 23, 24] {
            let syn = Builder::new().tcp(C, S, &Tcp::new(40000, port, 0x02).seq(1), b"");
            assert_eq!(
                forward(&mut sf, "lan0", &syn, 0),
                0x2,
                "{mode:?}: port {port}"
            );
        }
    }
}

/// A packet whose zone applies to the original direction only is looked up with the zone's
/// reply id too (`resolve_normal_ct`'s second lookup): the answer from inside the zone to a
/// connection opened from outside it (zone 0) is that connection's.
#[test]
fn a_reply_from_inside_an_original_zone_finds_its_connection() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(mode);
        let syn = Builder::new().tcp(S, C, &Tcp::new(2000, 22, 0x02).seq(1), b"");
        assert_eq!(forward(&mut sf, "wan0", &syn, 0), 0x1, "{mode:?}");
        let sa = Builder::new().tcp(C, S, &Tcp::new(22, 2000, 0x12).seq(7).ack(2), b"");
        assert_eq!(forward(&mut sf, "lan3", &sa, 1), 0x2, "established, zone 0");
        assert_eq!(sf.ct().len(), 1);
    }
}
