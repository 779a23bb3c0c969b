//! The router's own answers to arbitrary frames. Each frame crosses prerouting of a stateful
//! engine (connection tracking, DNAT, a reject rule); the TCP reset that would answer it
//! (`weir_engine::answer::tcp_reset`) is then sent through `Stateful::local_out`, attached to
//! the frame's connection (`Stateful::answer_ct`), where NAT may rewrite it. Never a panic; a
//! reset is always a well-formed RST from the frame's destination to its source, and its
//! checksums still hold after NAT.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::Mutex;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::{LinkType, PacketMeta, L3};

const RULES: &str = r#"table inet f {
  chain pre { type filter hook prerouting priority 0; tcp dport 23 reject with tcp reset; }
  chain out { type filter hook output priority 0; tcp dport 7 drop; }
}
table ip nat {
  chain dnat { type nat hook prerouting priority dstnat; tcp dport 8080 dnat to 198.18.31.2:80; }
  chain snat { type nat hook postrouting priority srcnat; oifname "wan0" masquerade; }
}
"#;

static ENGINE: Mutex<Option<Stateful>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut g = ENGINE.lock().unwrap();
    let sf = g.get_or_insert_with(|| {
        let (rs, _) = weir_lang::load_str("answers.nft", RULES).expect("ruleset checks");
        Stateful::new(
            Engine::new(Compiled::build(&rs, Mode::Compiled)),
            weir_conntrack::Config {
                max_entries: 4096,
                ..weir_conntrack::Config::default()
            },
        )
    });
    // the first byte: the link type and the time
    let (sel, bytes) = data.split_first().unwrap_or((&0, &[]));
    let link = if sel & 1 == 0 { LinkType::Ethernet } else { LinkType::RawIp };
    let now = (*sel as u64) * 10_000_000;
    let mut frame = bytes.to_vec();
    let mut pm = PacketMeta::parse(&frame, link);
    let mut pc = PacketCt::default();
    let mut meta = Meta::with_ifnames("lan0", "");
    let _ = sf.hook_mut(Hook::Prerouting, &mut frame, &mut pm, &mut meta, now, &mut pc);
    let Some(mut rst) = weir_engine::answer::tcp_reset(&frame, &pm, [2; 6], [4; 6]) else {
        return;
    };
    let r = PacketMeta::parse(&rst, LinkType::Ethernet);
    assert!(r.tcp_flags & 0x04 != 0, "not a reset");
    assert_eq!((r.saddr, r.daddr), (pm.daddr, pm.saddr), "not back to the sender");
    assert_eq!((r.sport, r.dport), (pm.dport, pm.sport));
    assert!(r.transport_checksum_ok(&rst));
    let apc = sf.answer_ct(&pc);
    if sf
        .local_out(&mut rst, Meta::with_ifnames("", "wan0"), apc, now)
        .is_accept()
    {
        let r = PacketMeta::parse(&rst, LinkType::Ethernet);
        assert!(r.transport_checksum_ok(&rst), "TCP checksum after NAT");
        assert!(r.l3 != L3::Ipv4 || r.ipv4_checksum_ok(&rst), "IPv4 checksum after NAT");
    }
});
