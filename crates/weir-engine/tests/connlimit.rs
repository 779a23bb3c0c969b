//! `ct count` (nft_connlimit): a rule-level limit on the connections through a rule, and a
//! per-element limit in a set filled from the packet path (`add @s { ip saddr ct count over N }`).
//! Connections are counted while they live in conntrack; closed (TIME_WAIT, CLOSE), expired
//! and never-confirmed ones leave the count.

use std::net::Ipv4Addr;
use weir_conntrack::Config;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::build::{tcp_flags as tf, Builder, Tcp};
use weir_wire::{LinkType, PacketMeta};

const S: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 20);
const SEC: u64 = 1_000_000_000;

fn stateful(rules: &str, mode: Mode) -> Stateful {
    let (rs, _) = weir_lang::load_str("t.nft", rules).unwrap_or_else(|(sm, d)| {
        panic!("{}", weir_lang::diag::render_all(&d, &sm));
    });
    Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default())
}

fn forward(sf: &mut Stateful, frame: &[u8], now_ns: u64) -> Decision {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let mut pc = PacketCt::default();
    for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
        let mut meta =
            Meta::with_ifnames("lan0", if hook == Hook::Prerouting { "" } else { "wan0" });
        let mut p = Pkt {
            frame,
            pm: &pm,
            meta: &mut meta,
            now_ns,
            conns: None,
        };
        let d = sf.hook(hook, &mut p, &mut pc);
        if !d.is_accept() {
            return d;
        }
    }
    sf.finish(&mut pc, now_ns)
}

fn syn(c: Ipv4Addr, port: u16) -> Vec<u8> {
    Builder::new().tcp(c, S, &Tcp::new(port, 80, tf::SYN).seq(100), &[])
}

fn rst(c: Ipv4Addr, port: u16) -> Vec<u8> {
    Builder::new().tcp(c, S, &Tcp::new(port, 80, tf::RST).seq(101), &[])
}

fn host(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, i)
}

const RULE_LEVEL: &str = "table ip f {
    chain fwd { type filter hook forward priority 0; policy accept;
        ct state new ct count over 2 counter drop
    }
}";

#[test]
fn rule_level_count_over() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(RULE_LEVEL, mode);
        let mut t = SEC;
        let mut fwd = |sf: &mut Stateful, f: &[u8]| {
            t += SEC / 10;
            forward(sf, f, t).is_accept()
        };
        assert!(fwd(&mut sf, &syn(host(1), 1000)));
        assert!(fwd(&mut sf, &syn(host(2), 1000)));
        // the third live connection is over 2
        assert!(!fwd(&mut sf, &syn(host(3), 1000)), "{mode:?}");
        assert!(!fwd(&mut sf, &syn(host(3), 1001)), "{mode:?}");
        // a retransmitted SYN of a counted connection is not added twice, but, as in Linux,
        // finding its own connection ends the collection early: the refused connection
        // behind it in the list is still counted, and the SYN is over the limit too
        assert!(!fwd(&mut sf, &syn(host(1), 1000)), "{mode:?}");
        // a reset (before any reply) ends the first connection in conntrack before the
        // forward chain: its collection drops the ended and the refused connections, so the
        // reset itself is within the limit (its tuple is counted once more, until the next
        // collection finds it gone)
        assert!(fwd(&mut sf, &rst(host(1), 1000)));
        assert!(fwd(&mut sf, &syn(host(4), 1000)), "{mode:?}");
        assert!(!fwd(&mut sf, &syn(host(5), 1000)), "{mode:?}");
    }
}

const PER_HOST: &str = "table ip f {
    set perhost { type ipv4_addr; size 1024; flags dynamic; }
    chain fwd { type filter hook forward priority 0; policy accept;
        ct state new add @perhost { ip saddr ct count over 1 } counter drop
    }
}";

#[test]
fn set_element_count_per_host() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = stateful(PER_HOST, mode);
        let t = std::cell::Cell::new(SEC);
        let fwd = |sf: &mut Stateful, f: &[u8]| {
            t.set(t.get() + SEC / 10);
            forward(sf, f, t.get()).is_accept()
        };
        assert!(fwd(&mut sf, &syn(host(1), 1000)));
        assert!(
            !fwd(&mut sf, &syn(host(1), 1001)),
            "{mode:?}: second of host 1"
        );
        assert!(
            fwd(&mut sf, &syn(host(2), 1000)),
            "{mode:?}: first of host 2"
        );
        assert!(!fwd(&mut sf, &syn(host(2), 1001)), "{mode:?}");
        // host 1's connection times out (SYN_SENT: 120 s): host 1 may open another
        t.set(t.get() + 121 * SEC);
        assert!(fwd(&mut sf, &syn(host(1), 1002)), "{mode:?}");
        assert!(!fwd(&mut sf, &syn(host(1), 1003)), "{mode:?}");
        let st = &sf.engine().st;
        assert_eq!(st.dynset(0, 0).map(|s| s.len_at(t.get())), Some(2));
    }
}
