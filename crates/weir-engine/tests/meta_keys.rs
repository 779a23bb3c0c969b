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
