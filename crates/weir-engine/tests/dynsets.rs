//! Sets filled from the packet path: `add @s`, `update @s`, `delete @s`, element timeouts,
//! per-element `limit` and `counter`, a full set, and lookups that see what was added.

use std::net::Ipv4Addr;
use weir_engine::{Compiled, Decision, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;
use weir_wire::{LinkType, PacketMeta};

fn engine(rules: &str, mode: Mode) -> Engine {
    let (rs, _) = weir_lang::load_str("t.nft", rules).unwrap_or_else(|(sm, d)| {
        panic!("{}", weir_lang::diag::render_all(&d, &sm));
    });
    Engine::new(Compiled::build(&rs, mode))
}

fn run(e: &mut Engine, src: Ipv4Addr, dport: u16, now_ns: u64) -> Decision {
    let f = Builder::new().udp(src, Ipv4Addr::new(198, 19, 0, 1), 1000, dport, b"x");
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut p = Pkt {
        frame: &f,
        pm: &pm,
        meta: &mut Meta::with_ifnames("lan0", "wan0"),
        now_ns,
        conns: None,
    };
    e.process(Hook::Forward, &mut p)
}

const S: u64 = 1_000_000_000;

#[test]
fn port_knocking_adds_and_timeouts_expire() {
    let rules = "table ip f {
        set knocked { type ipv4_addr; flags dynamic, timeout; timeout 10s; }
        chain fwd { type filter hook forward priority 0; policy drop;
            udp dport 7000 add @knocked { ip saddr } drop
            udp dport 22 ip saddr @knocked accept
            udp dport 9000 delete @knocked { ip saddr } drop
        }
    }";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut e = engine(rules, mode);
        let a = Ipv4Addr::new(198, 18, 0, 5);
        let b = Ipv4Addr::new(198, 18, 0, 6);
        assert!(!run(&mut e, a, 22, S).is_accept(), "not knocked yet");
        assert!(!run(&mut e, a, 7000, S).is_accept());
        assert!(run(&mut e, a, 22, 2 * S).is_accept(), "{mode:?}: knocked");
        assert!(!run(&mut e, b, 22, 2 * S).is_accept(), "another host");
        // `add` does not refresh the timeout: it ends 10 s after the knock
        assert!(!run(&mut e, a, 7000, 5 * S).is_accept());
        assert!(run(&mut e, a, 22, 10 * S).is_accept());
        assert!(!run(&mut e, a, 22, 11 * S + 1).is_accept(), "expired");
        // knock again, then delete
        run(&mut e, a, 7000, 12 * S);
        assert!(run(&mut e, a, 22, 12 * S).is_accept());
        run(&mut e, a, 9000, 13 * S);
        assert!(!run(&mut e, a, 22, 13 * S).is_accept(), "deleted");
        assert_eq!(e.st.dynset(0, 0).map(|d| d.len_at(13 * S)), Some(0));
    }
}

#[test]
fn update_refreshes_and_per_element_limits_are_per_source() {
    let rules = "table ip f {
        set flood { type ipv4_addr; flags dynamic, timeout; timeout 5s; }
        chain fwd { type filter hook forward priority 0; policy accept;
            update @flood { ip saddr limit rate over 2/second burst 2 packets } counter drop
        }
    }";
    let mut e = engine(rules, Mode::Compiled);
    let a = Ipv4Addr::new(198, 18, 0, 5);
    let b = Ipv4Addr::new(198, 18, 0, 6);
    // a burst of 2 passes, the rest of the same second is over the rate and dropped
    let t = 100 * S;
    let got: Vec<bool> = (0..5)
        .map(|i| run(&mut e, a, 53, t + i).is_accept())
        .collect();
    assert_eq!(got, vec![true, true, false, false, false]);
    // b has its own bucket
    assert!(run(&mut e, b, 53, t + 10).is_accept());
    // update keeps refreshing the element's timeout: still there 4 s after the last packet
    // (the first was 6 s ago)
    for i in 1..=6u64 {
        run(&mut e, a, 53, t + i * S);
    }
    let d = e.st.dynset(0, 0).unwrap();
    assert!(d
        .elements(t + 10 * S)
        .iter()
        .any(|(k, ..)| k[0] == u32::from(a) as u128));
    assert!(d
        .elements(t + 12 * S)
        .iter()
        .all(|(k, ..)| k[0] != u32::from(a) as u128));
}

#[test]
fn a_full_set_refuses_new_elements_until_they_expire() {
    let rules = "table ip f {
        set seen { type ipv4_addr; size 3; flags dynamic, timeout; timeout 2s; }
        chain fwd { type filter hook forward priority 0; policy drop;
            add @seen { ip saddr } accept
        }
    }";
    let mut e = engine(rules, Mode::Compiled);
    for i in 0..3u8 {
        assert!(run(&mut e, Ipv4Addr::new(198, 18, 0, i), 53, S).is_accept());
    }
    // full: the rule stops, the policy drops
    assert!(!run(&mut e, Ipv4Addr::new(198, 18, 0, 9), 53, S).is_accept());
    assert_eq!(e.st.dynset_full, 1);
    // present elements still match
    assert!(run(&mut e, Ipv4Addr::new(198, 18, 0, 1), 53, S).is_accept());
    // after the timeout there is room again
    assert!(run(&mut e, Ipv4Addr::new(198, 18, 0, 9), 53, 4 * S).is_accept());
}

/// A constant in a dynamic set's key (`add @s { ip saddr . 7001 }`, nft's port knocking
/// with stages): the element holds the constant, and a lookup of the packet's own fields
/// finds it only when they equal it.
#[test]
fn constants_in_a_key_are_stored_as_written() {
    let rules = "table ip f {
        set stage { type ipv4_addr . inet_service; flags dynamic, timeout; timeout 10s; }
        chain fwd { type filter hook forward priority 0; policy drop;
            udp dport 7000 add @stage { ip saddr . 7001 } drop
            ip saddr . udp dport @stage accept
        }
    }";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut e = engine(rules, mode);
        let a = Ipv4Addr::new(198, 18, 0, 5);
        assert!(
            !run(&mut e, a, 7001, S).is_accept(),
            "{mode:?}: not knocked yet"
        );
        assert!(!run(&mut e, a, 7000, S).is_accept());
        assert!(
            run(&mut e, a, 7001, 2 * S).is_accept(),
            "{mode:?}: the second stage"
        );
        assert!(
            !run(&mut e, a, 7002, 2 * S).is_accept(),
            "{mode:?}: another port"
        );
    }
}
