//! `meta iiftype` / `oiftype` and `iifgroup` / `oifgroup`: the devices' ARPHRD types and groups (as given by the caller, or for a
//! device known by name only: loopback for `lo`, Ethernet otherwise); none at a hook without
//! that device, where the kernel's nft_meta breaks the rule.

use weir_engine::{Meta, Mode};
use weir_lang::ir::Hook;

mod common;
use common::*;

const RULES: &str = "table ip t {
  chain pre {
    type filter hook prerouting priority 0;
    meta iiftype ether meta mark set meta mark | 0x1
    meta iiftype loopback meta mark set meta mark | 0x2
    meta oiftype ether meta mark set meta mark | 0x4
    meta iiftype 65534 meta mark set meta mark | 0x8
    meta iifgroup default meta mark set meta mark | 0x40
    meta iifgroup 5 meta mark set meta mark | 0x80
    meta cpu 1 meta mark set meta mark | 0x100
    meta skuid root meta mark set meta mark | 0x200
    meta skgid 100 meta mark set meta mark | 0x400
  }
  chain out {
    type filter hook output priority 0;
    meta iiftype ether meta mark set meta mark | 0x10
    meta oiftype ether meta mark set meta mark | 0x20
  }
}
";

#[test]
fn device_types() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        let mark = |sf: &mut weir_engine::stateful::Stateful, hook, meta| {
            mark_with(sf, hook, udp4(), meta, 1_000)
        };
        assert_eq!(
            mark(&mut sf, Hook::Prerouting, Meta::with_ifnames("eth0", "")),
            0x1 | 0x40
        );
        assert_eq!(
            mark(&mut sf, Hook::Prerouting, Meta::with_ifnames("lo", "")),
            0x2 | 0x40
        );
        let mut m = Meta::with_ifnames("wg0", "");
        m.iiftype = 65534;
        m.iifgroup = Some(5);
        assert_eq!(mark(&mut sf, Hook::Prerouting, m), 0x8 | 0x80);
        // a local socket's owner, as NFQUEUE says it; none for a forwarded packet
        let mut m = Meta::with_ifnames("eth0", "");
        (m.skuid, m.skgid) = (Some(0), Some(100));
        assert_eq!(
            mark(&mut sf, Hook::Prerouting, m),
            0x1 | 0x40 | 0x200 | 0x400
        );
        // the CPU the caller says the hooks run on
        sf.set_cpu(1);
        assert_eq!(
            mark(&mut sf, Hook::Prerouting, Meta::with_ifnames("eth0", "")),
            0x1 | 0x40 | 0x100
        );
        sf.set_cpu(0);
        // no input device at output: the iiftype rule breaks, the oiftype one matches
        assert_eq!(
            mark(&mut sf, Hook::Output, Meta::with_ifnames("", "eth1")),
            0x20
        );
    }
}

/// `meta nftrace set 1` flags the packet (`skb->nf_trace`): `meta nftrace` reads it in the
/// same chain and in the packet's later hooks (the flag rides the packet), and `set 0`
/// clears it.
#[test]
fn nftrace_rides_the_packet_from_hook_to_hook() {
    use weir_conntrack::Config;
    use weir_engine::stateful::Stateful;
    use weir_engine::{Compiled, Engine};
    let rules = "table inet t {
  chain pre {
    type filter hook prerouting priority 0;
    udp dport 53 meta nftrace set 1
    meta nftrace 1 meta mark set 0x1
  }
  chain fwd {
    type filter hook forward priority 0;
    meta nftrace 1 meta mark set mark | 0x2
    meta nftrace 0 meta mark set mark | 0x4
    meta nftrace set 0
  }
  chain post {
    type filter hook postrouting priority 0;
    meta nftrace 0 meta mark set mark | 0x8
  }
}";
    let rs = weir_lang::load_str("t.nft", rules).unwrap().0;
    assert!(rs.refuse_unevaluated().is_ok(), "{:?}", rs.unevaluated());
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default());
        for (dport, want) in [(53u16, 0x1 | 0x2 | 0x8), (54, 0x4 | 0x8)] {
            let f = weir_wire::build::udp4(
                std::net::Ipv4Addr::new(198, 18, 0, 1),
                std::net::Ipv4Addr::new(198, 19, 0, 1),
                1000,
                dport,
                b"x",
            );
            // (a fresh Meta each hook, as the router makes them)
            let (mark, _) = forward_via(&mut sf, "lan0", "wan0", &f, 1);
            assert_eq!(mark, want, "{mode:?} dport {dport}");
        }
    }
}

/// A dormant table (`flags dormant`) is kept but its chains do not run; the same table
/// awake runs them.
#[test]
fn dormant_tables_do_not_run() {
    for (flags, want) in [("flags dormant", 0), ("", 1)] {
        let rules = format!(
            "table ip t {{\n {flags}\n chain c {{\n  type filter hook input priority 0;\n  meta mark set 1\n }}\n}}\n"
        );
        for mode in [Mode::Compiled, Mode::Linear] {
            let mut sf = engine(&rules, mode);
            assert_eq!(mark(&mut sf, udp4()), want, "{flags:?} {mode:?}");
        }
    }
}
