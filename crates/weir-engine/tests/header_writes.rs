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

fn run(mode: Mode, f: Vec<u8>) -> (Vec<u8>, u32) {
    run_rules(RULES, mode, f)
}

fn run_rules(rules: &str, mode: Mode, mut f: Vec<u8>) -> (Vec<u8>, u32) {
    let rs = weir_lang::load_str("t.nft", rules).unwrap().0;
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

/// Raw payload writes as nft compiles them: `@ih` bits written in 16-bit words with the
/// transport checksum updated; `@nh` bytes written with no checksum touched (a raw
/// expression has no protocol, so nft asks for none); a write past the packet stops the rule.
#[test]
fn raw_payload_writes_land_as_the_kernel_writes_them() {
    let rules = "table inet t {
  chain c {
    type filter hook prerouting priority 0;
    @ih,58,6 set 0x1 @ih,86,6 set 0x2 @ih,170,22 set 0x3 meta mark set 1
    @nh,64,8 set 9 meta mark set 2
    @ih,800,8 set 1 meta mark set 3
  }
}
";
    for mode in [Mode::Compiled, Mode::Linear] {
        let payload: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37) | 0xc0).collect();
        for udp in [false, true] {
            let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
            let f = if udp {
                Builder::new().udp(a, b, 1000, 53, &payload)
            } else {
                Builder::new().tcp(a, b, &Tcp::new(1000, 443, tcp_flags::ACK), &payload)
            };
            let pm0 = PacketMeta::parse(&f, LinkType::Ethernet);
            let inner = pm0.l4_off as usize + if udp { 8 } else { 20 };
            let (out, mark) = run_rules(rules, mode, f.clone());
            // the last rule's write lies past the packet: it stopped; the second ran
            assert_eq!(mark, 2, "udp {udp}");
            // bits 58..64 = 0b000001, 86..92 = 0b000010, 170..192 = 3, the rest untouched
            let ih = &out[inner..];
            assert_eq!(ih[7] & 0x3f, 0x01);
            assert_eq!(ih[7] & 0xc0, payload[7] & 0xc0);
            assert_eq!((ih[10] & 0x03) << 4 | ih[11] >> 4, 0x02);
            assert_eq!(ih[10] & 0xfc, payload[10] & 0xfc);
            assert_eq!(ih[11] & 0x0f, payload[11] & 0x0f);
            assert_eq!(
                u32::from_be_bytes([0, ih[21] & 0x3f, ih[22], ih[23]]),
                3,
                "udp {udp}"
            );
            for i in (0..32).filter(|i| ![7, 10, 11, 21, 22, 23].contains(i)) {
                assert_eq!(ih[i], payload[i], "byte {i} of the payload");
            }
            // the IP TTL written raw (byte 8 of the network header), its checksum left as it
            // was: the header checksum no longer matches, as in the kernel
            let pm = PacketMeta::parse(&out, LinkType::Ethernet);
            assert_eq!(pm.get(&out, Field::IpTtl), Some(9));
            assert_eq!(out[24..26], f[24..26], "IPv4 header checksum untouched");
            assert_ne!(weir_wire::checksum::checksum(&out[14..34]), 0);
            // the transport checksum follows the @ih writes: with the TTL put back, the
            // frame's checksums are all valid
            let mut fixed = out.clone();
            fixed[22] = f[22];
            assert!(
                matches!(classify_checksum(&fixed, &pm), Ok(CsumState::Valid)),
                "udp {udp}"
            );
        }
    }
}
