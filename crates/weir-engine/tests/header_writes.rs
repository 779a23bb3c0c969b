//! Header writes through the stateful engine (`ip ttl set`, `ip dscp set`, `tcp flags set`,
//! `ip6 hoplimit set`): the frame leaves with the field written and its checksums right,
//! and a later rule of the chain sees the written value.

use std::net::{Ipv4Addr, Ipv6Addr};
use weir_conntrack::Config;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_wire::build::{tcp_flags, Builder, Tcp};
use weir_wire::offload::{classify_checksum, CsumState};
use weir_wire::{Field, LinkType, PacketMeta};

const RULES: &str = "table inet t {
  chain c {
    type filter hook prerouting priority 0;
    ip ttl set 5 ip dscp set cs1 tcp flags set syn | ack
    ip6 hoplimit set 3 ip6 flowlabel set 0x12345
    ip ttl 5 meta mark set 1
  }
}
";

fn run(mode: Mode, mut f: Vec<u8>) -> (Vec<u8>, u32) {
    let rs = weir_lang::load_str("t.nft", RULES).unwrap().0;
    assert!(rs.refuse_unevaluated().is_ok(), "{:?}", rs.unevaluated());
    let mut sf = Stateful::new(Engine::new(Compiled::build(&rs, mode)), Config::default());
    let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut meta = Meta::with_ifnames("lan0", "");
    let d = sf.hook_mut(
        Hook::Prerouting,
        &mut f,
        &mut pm,
        &mut meta,
        1_000,
        &mut PacketCt::default(),
    );
    assert_eq!(d, Decision::Accept);
    (f, meta.mark)
}

#[test]
fn header_writes_land_in_the_frame_with_their_checksums() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let t = Tcp::new(1000, 443, tcp_flags::SYN);
        let f = Builder::new().tcp(
            Ipv4Addr::new(198, 18, 0, 1),
            Ipv4Addr::new(198, 18, 0, 2),
            &t,
            b"x",
        );
        let (out, mark) = run(mode, f);
        let pm = PacketMeta::parse(&out, LinkType::Ethernet);
        assert_eq!(pm.get(&out, Field::IpTtl), Some(5));
        assert_eq!(pm.get(&out, Field::IpDscp), Some(8));
        assert_eq!(
            pm.get(&out, Field::TcpFlags),
            Some((tcp_flags::SYN | tcp_flags::ACK) as u128)
        );
        assert!(
            weir_wire::checksum::checksum(&out[14..34]) == 0,
            "IPv4 header checksum"
        );
        assert!(matches!(classify_checksum(&out, &pm), Ok(CsumState::Valid)));
        // the next rule of the chain reads what the first one wrote
        assert_eq!(mark, 1);
        let a: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let (out, _) = run(mode, Builder::new().udp(a, b, 1, 2, b"x"));
        let pm = PacketMeta::parse(&out, LinkType::Ethernet);
        assert_eq!(pm.get(&out, Field::Ip6Hoplimit), Some(3));
        assert_eq!(pm.get(&out, Field::Ip6Flowlabel), Some(0x12345));
        assert!(matches!(classify_checksum(&out, &pm), Ok(CsumState::Valid)));
    }
}
