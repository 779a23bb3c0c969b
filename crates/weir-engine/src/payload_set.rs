//! Header writes other than addresses and ports (`ip ttl set 5`, `ip dscp set cs1`, `tcp
//! flags set syn`, `ip6 hoplimit set 1`, `udp checksum set 0`...), as nft_payload's set
//! writes them: the field's bits replaced in place and the checksum that covers them
//! updated incrementally (RFC 1624), as nft asks the kernel to: the IPv4 header's for IPv4
//! header fields, the transport checksum for fields of a TCP, UDP, UDP-Lite, ICMP or ICMPv6
//! header; none for IPv6 header fields (no header checksum; none of them is in the
//! pseudo-header) or for a checksum itself. Addresses and ports go through NAT's rewrite
//! ([`crate::nat::set_header_field`]).

use weir_wire::meta::proto;
use weir_wire::{Field, PacketMeta, L3};

/// Which checksum covers a field.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Csum {
    None,
    /// The IPv4 header checksum (offset 10 of the IP header).
    Ip,
    /// The transport checksum at this offset of the transport header.
    L4(usize),
}

/// Where a field lies: in the IP header (`l4` false) or the transport header, `bytes`
/// bytes at `at` holding `bits` bits at `shift`, and its checksum.
struct Place {
    l4: bool,
    at: usize,
    bytes: usize,
    shift: u32,
    bits: u32,
    csum: Csum,
}

fn place(f: Field, pm: &PacketMeta) -> Option<Place> {
    use Field as F;
    let v4 = pm.l3 == L3::Ipv4;
    let v6 = pm.l3 == L3::Ipv6;
    let p = pm.l4proto;
    let ip = |at, bytes, shift, bits, csum| Place {
        l4: false,
        at,
        bytes,
        shift,
        bits,
        csum,
    };
    let th = |at, bytes, shift, bits, csum| Place {
        l4: true,
        at,
        bytes,
        shift,
        bits,
        csum,
    };
    // the transport checksum of the packet's protocol
    let l4sum = match p {
        proto::TCP => Csum::L4(16),
        proto::UDP | proto::UDPLITE => Csum::L4(6),
        proto::ICMP if v4 => Csum::L4(2),
        proto::ICMPV6 if v6 => Csum::L4(2),
        _ => Csum::None,
    };
    Some(match f {
        F::IpVersion if v4 => ip(0, 1, 4, 4, Csum::Ip),
        F::IpHdrlength if v4 => ip(0, 1, 0, 4, Csum::Ip),
        F::IpDscp if v4 => ip(1, 1, 2, 6, Csum::Ip),
        F::IpEcn if v4 => ip(1, 1, 0, 2, Csum::Ip),
        F::IpLength if v4 => ip(2, 2, 0, 16, Csum::Ip),
        F::IpId if v4 => ip(4, 2, 0, 16, Csum::Ip),
        F::IpFragOff if v4 => ip(6, 2, 0, 16, Csum::Ip),
        F::IpTtl if v4 => ip(8, 1, 0, 8, Csum::Ip),
        F::IpProtocol if v4 => ip(9, 1, 0, 8, Csum::Ip),
        F::IpChecksum if v4 => ip(10, 2, 0, 16, Csum::None),
        F::Ip6Dscp if v6 => ip(0, 2, 6, 6, Csum::None),
        F::Ip6Ecn if v6 => ip(0, 2, 4, 2, Csum::None),
        F::Ip6Flowlabel if v6 => ip(0, 4, 0, 20, Csum::None),
        F::Ip6Length if v6 => ip(4, 2, 0, 16, Csum::None),
        F::Ip6Nexthdr if v6 => ip(6, 1, 0, 8, Csum::None),
        F::Ip6Hoplimit if v6 => ip(7, 1, 0, 8, Csum::None),
        F::TcpSequence if p == proto::TCP => th(4, 4, 0, 32, l4sum),
        F::TcpAckseq if p == proto::TCP => th(8, 4, 0, 32, l4sum),
        F::TcpDoff if p == proto::TCP => th(12, 1, 4, 4, l4sum),
        F::TcpFlags if p == proto::TCP => th(13, 1, 0, 8, l4sum),
        F::TcpWindow if p == proto::TCP => th(14, 2, 0, 16, l4sum),
        F::TcpChecksum if p == proto::TCP => th(16, 2, 0, 16, Csum::None),
        F::TcpUrgptr if p == proto::TCP => th(18, 2, 0, 16, l4sum),
        F::UdpLength if p == proto::UDP => th(4, 2, 0, 16, l4sum),
        F::UdpChecksum if p == proto::UDP => th(6, 2, 0, 16, Csum::None),
        F::IcmpType if v4 && p == proto::ICMP => th(0, 1, 0, 8, l4sum),
        F::IcmpCode if v4 && p == proto::ICMP => th(1, 1, 0, 8, l4sum),
        F::IcmpChecksum if v4 && p == proto::ICMP => th(2, 2, 0, 16, Csum::None),
        F::Icmp6Type if v6 && p == proto::ICMPV6 => th(0, 1, 0, 8, l4sum),
        F::Icmp6Code if v6 && p == proto::ICMPV6 => th(1, 1, 0, 8, l4sum),
        F::Icmp6Checksum if v6 && p == proto::ICMPV6 => th(2, 2, 0, 16, Csum::None),
        _ => return None,
    })
}

/// The fields [`set_field`] writes.
pub const WRITABLE: &[Field] = &[
    Field::IpVersion,
    Field::IpHdrlength,
    Field::IpDscp,
    Field::IpEcn,
    Field::IpLength,
    Field::IpId,
    Field::IpFragOff,
    Field::IpTtl,
    Field::IpProtocol,
    Field::IpChecksum,
    Field::Ip6Dscp,
    Field::Ip6Ecn,
    Field::Ip6Flowlabel,
    Field::Ip6Length,
    Field::Ip6Nexthdr,
    Field::Ip6Hoplimit,
    Field::TcpSequence,
    Field::TcpAckseq,
    Field::TcpDoff,
    Field::TcpFlags,
    Field::TcpWindow,
    Field::TcpChecksum,
    Field::TcpUrgptr,
    Field::UdpLength,
    Field::UdpChecksum,
    Field::IcmpType,
    Field::IcmpCode,
    Field::IcmpChecksum,
    Field::Icmp6Type,
    Field::Icmp6Code,
    Field::Icmp6Checksum,
];

/// Write `v` into field `f` of the packet (see the module's documentation); false when the
/// packet does not have the field (another family or protocol, a transport header absent or
/// cut short), as the kernel's write breaks the rule there.
pub fn set_field(frame: &mut [u8], pm: &PacketMeta, f: Field, v: u128) -> bool {
    if !pm.l3_ok() {
        return false;
    }
    let Some(pl) = place(f, pm) else {
        return false;
    };
    if pl.l4 && !pm.has_l4 {
        return false;
    }
    let base = if pl.l4 {
        pm.l4_off as usize
    } else {
        pm.l3_off as usize
    };
    let end = pm.l3_end().min(frame.len());
    let at = base + pl.at;
    if at + pl.bytes > end {
        return false;
    }
    // the field's bytes as a number, the bits replaced
    let old: u64 = frame[at..at + pl.bytes]
        .iter()
        .fold(0, |a, b| (a << 8) | *b as u64);
    let mask = ((1u64 << pl.bits) - 1) << pl.shift;
    let new = (old & !mask) | (((v as u64) << pl.shift) & mask);
    // the 16-bit words covering them, relative to the start of the header the checksum
    // covers (both headers start at even offsets of what their checksum sums)
    let w0 = (at - base) & !1;
    let w1 = (at - base + pl.bytes + 1) & !1;
    let words = |fr: &[u8]| -> Vec<u16> {
        (w0..w1)
            .step_by(2)
            .map(|i| {
                let hi = fr.get(base + i).copied().unwrap_or(0);
                let lo = fr.get(base + i + 1).copied().unwrap_or(0);
                u16::from_be_bytes([hi, lo])
            })
            .collect()
    };
    let before = words(frame);
    for (i, b) in frame[at..at + pl.bytes].iter_mut().enumerate() {
        *b = (new >> (8 * (pl.bytes - 1 - i))) as u8;
    }
    let after = words(frame);
    let sum_at = match pl.csum {
        Csum::None => return true,
        Csum::Ip => pm.l3_off as usize + 10,
        Csum::L4(o) => pm.l4_off as usize + o,
    };
    if sum_at + 2 > end {
        return true;
    }
    // RFC 1624: HC' = ~(~HC + ~m + m')
    let mut acc: u32 = !u16::from_be_bytes([frame[sum_at], frame[sum_at + 1]]) as u32 & 0xffff;
    for (o, n) in before.iter().zip(&after) {
        acc += (!*o) as u32 + *n as u32;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    let sum = !(acc as u16);
    frame[sum_at..sum_at + 2].copy_from_slice(&sum.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use weir_wire::build::{tcp_flags, Builder, Tcp};
    use weir_wire::offload::{classify_checksum, CsumState};
    use weir_wire::LinkType;

    fn ok(frame: &[u8]) -> bool {
        let pm = PacketMeta::parse(frame, LinkType::RawIp);
        let ip_ok = {
            let ihl = (frame[0] & 0x0f) as usize * 4;
            weir_wire::checksum::checksum(&frame[..ihl]) == 0
        };
        ip_ok && matches!(classify_checksum(frame, &pm), Ok(CsumState::Valid))
    }

    #[test]
    fn writes_keep_the_checksums_right() {
        let t = Tcp::new(1000, 443, tcp_flags::SYN);
        let a = Ipv4Addr::new(198, 18, 0, 1);
        let b = Ipv4Addr::new(198, 18, 0, 2);
        let mut f = Builder::raw().tcp(a, b, &t, b"hello");
        assert!(ok(&f));
        for (field, v) in [
            (Field::IpTtl, 5u128),
            (Field::IpDscp, 8),
            (Field::IpEcn, 3),
            (Field::IpId, 0xbeef),
            (Field::TcpFlags, (tcp_flags::SYN | tcp_flags::ACK) as u128),
            (Field::TcpWindow, 1234),
            (Field::TcpSequence, 0xdead_beef),
            (Field::TcpUrgptr, 7),
        ] {
            let pm = PacketMeta::parse(&f, LinkType::RawIp);
            assert!(set_field(&mut f, &pm, field, v), "{}", field.name());
            let pm = PacketMeta::parse(&f, LinkType::RawIp);
            assert_eq!(pm.get(&f, field), Some(v), "{}", field.name());
            assert!(ok(&f), "{}: checksums", field.name());
        }
        // a checksum written as given
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(set_field(&mut f, &pm, Field::TcpChecksum, 0));
        assert_eq!(&f[20 + 16..20 + 18], &[0, 0]);
        // not this packet's: nothing written
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(!set_field(&mut f, &pm, Field::UdpChecksum, 0));
        assert!(!set_field(&mut f, &pm, Field::Ip6Hoplimit, 1));
    }

    #[test]
    fn ipv6_and_udp_and_icmp_writes() {
        let a: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        let b: std::net::Ipv6Addr = "2001:db8::2".parse().unwrap();
        let mut f = Builder::raw().udp(a, b, 1, 2, b"abc");
        for (field, v) in [
            (Field::Ip6Hoplimit, 1u128),
            (Field::Ip6Dscp, 46),
            (Field::Ip6Ecn, 1),
            (Field::Ip6Flowlabel, 0x12345),
        ] {
            let pm = PacketMeta::parse(&f, LinkType::RawIp);
            assert!(set_field(&mut f, &pm, field, v));
            let pm = PacketMeta::parse(&f, LinkType::RawIp);
            assert_eq!(pm.get(&f, field), Some(v), "{}", field.name());
            assert!(matches!(classify_checksum(&f, &pm), Ok(CsumState::Valid)));
        }
        let mut f = Builder::raw().icmp_echo(
            Ipv4Addr::new(198, 18, 0, 1),
            Ipv4Addr::new(198, 18, 0, 2),
            true,
            7,
            8,
            b"x",
        );
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(set_field(&mut f, &pm, Field::IcmpType, 0));
        // the ICMP checksum covers the ICMP message
        assert_eq!(f[20], 0);
        assert_eq!(weir_wire::checksum::checksum(&f[20..]), 0);
    }
}
