//! Values combined from two selectors (nft's bitwise with a second register) and a constant
//! combined after a shift: `meta mark set meta mark | iif | meta cpu`, `meta mark set ct mark
//! & 0xffff0000 | meta mark & 0xffff`, `meta mark set ip dscp << 26 | 0x10`, and a match
//! on such a value. These are the forms of nftables' own tests (`any/ct.t`, `any/meta.t`,
//! `ip/ct.t`), which newer nft compiles to a bitwise with a second register; Debian's nft
//! 1.0.6 here refuses them, so no kernel lab checks them.

use std::net::Ipv4Addr;
use weir_engine::{Compiled, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::build::Builder;
use weir_wire::{LinkType, PacketMeta};

/// The mark one packet (DSCP 46) leaves the chain with, from mark 0x1234_5678 on input
/// device 3 and CPU 1.
fn mark_after(rule: &str, mode: Mode) -> u32 {
    let text = format!(
        "table ip t {{\n chain c {{\n  type filter hook input priority 0\n  {rule}\n }}\n}}\n"
    );
    let rs = weir_lang::load_str("t.nft", &text)
        .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)))
        .0;
    assert!(
        rs.unevaluated().is_empty(),
        "{rule}: {:?}",
        rs.unevaluated()
    );
    let mut e = Engine::new(Compiled::build(&rs, mode));
    let f = Builder::new().tos(46, 0).udp(
        Ipv4Addr::new(198, 18, 0, 1),
        Ipv4Addr::new(198, 18, 0, 2),
        1000,
        53,
        b"x",
    );
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut meta = Meta {
        mark: 0x1234_5678,
        iif: 3,
        cpu: 1,
        has_ct: true,
        ct_mark: 0xabcd_0000,
        ..Meta::default()
    };
    let mut p = Pkt {
        frame: &f,
        pm: &pm,
        meta: &mut meta,
        now_ns: 0,
        conns: None,
    };
    assert!(e.process(Hook::Input, &mut p).is_accept());
    meta.mark
}

#[test]
fn values_of_two_selectors_and_after_a_shift() {
    for mode in [Mode::Compiled, Mode::Linear] {
        assert_eq!(
            mark_after("meta mark set meta mark | iif | meta cpu", mode),
            0x1234_5678 | 3 | 1
        );
        assert_eq!(
            mark_after(
                "meta mark set ct mark and 0xffff0000 or meta mark and 0xffff",
                mode
            ),
            0xabcd_5678
        );
        assert_eq!(
            mark_after("meta mark set meta mark ^ iif", mode),
            0x1234_5678 ^ 3
        );
        assert_eq!(
            mark_after("meta mark set ip dscp << 26 | 0x10", mode),
            46 << 26 | 0x10
        );
        assert_eq!(
            mark_after("meta mark set ip dscp << 2 | 0x10", mode),
            46 << 2 | 0x10
        );
        // a match on such a value
        assert_eq!(
            mark_after("meta mark | iif 0x1234567b meta mark set 7", mode),
            7
        );
        assert_eq!(
            mark_after("meta mark | iif 0x12345678 meta mark set 7", mode),
            0x1234_5678
        );
    }
}
