//! `meta iiftype` / `oiftype` and `iifgroup` / `oifgroup`: the devices' ARPHRD types and groups (as given by the caller, or for a
//! device known by name only: loopback for `lo`, Ethernet otherwise); none at a hook without
//! that device, where the kernel's nft_meta breaks the rule.

use std::net::Ipv4Addr;
use weir_conntrack::Config;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;
use weir_wire::{LinkType, PacketMeta};

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
  }
  chain out {
    type filter hook output priority 0;
    meta iiftype ether meta mark set meta mark | 0x10
    meta oiftype ether meta mark set meta mark | 0x20
  }
}
";

fn mark(sf: &mut Stateful, hook: Hook, mut meta: Meta) -> u32 {
    let mut p = Builder::raw().udp(
        Ipv4Addr::new(198, 18, 0, 1),
        Ipv4Addr::new(198, 18, 0, 2),
        1,
        2,
        b"x",
    );
    let mut pm = PacketMeta::parse(&p, LinkType::RawIp);
    sf.hook_mut(
        hook,
        &mut p,
        &mut pm,
        &mut meta,
        1_000,
        &mut PacketCt::default(),
    );
    meta.mark
}

#[test]
fn device_types() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let rs = weir_lang::load_str("t.nft", RULES).unwrap().0;
        assert!(rs.refuse_unevaluated().is_ok(), "{:?}", rs.unevaluated());
        let mut sf = Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default());
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
