//! IPv6 neighbour discovery (RFC 4861): the neighbour a solicitation or advertisement tells
//! of (what the router learns), and the solicitation the router sends for a next hop it does
//! not know.

use weir_wire::{Addr, Mac};

/// The sender of an IPv6 neighbour solicitation (its source address and source link-layer
/// option) or advertisement (its target address and target link-layer option), checked as
/// RFC 4861 says a node must (hop limit 255, code 0).
pub fn sender(f: &[u8]) -> Option<(Addr, Mac)> {
    if f.get(12..14)? != [0x86, 0xdd] || *f.get(20)? != 58 || *f.get(21)? != 255 {
        return None;
    }
    let icmp = f.get(54..)?;
    let (typ, code) = (*icmp.first()?, *icmp.get(1)?);
    if code != 0 || !matches!(typ, 135 | 136) {
        return None;
    }
    let target = u128::from_be_bytes(icmp.get(8..24)?.try_into().ok()?);
    let src = u128::from_be_bytes(f.get(22..38)?.try_into().ok()?);
    let (addr, want) = if typ == 135 { (src, 1) } else { (target, 2) };
    if addr == 0 || addr >> 120 == 0xff {
        return None;
    }
    // options: type, length in units of 8 bytes, value
    let mut o = icmp.get(24..)?;
    while o.len() >= 8 {
        let len = o[1] as usize * 8;
        if len == 0 || len > o.len() {
            return None;
        }
        if o[0] == want && len == 8 {
            let mac = Mac::from_slice(&o[2..8])?;
            return (!mac.is_multicast()).then_some((Addr::v6(addr), mac));
        }
        o = &o[len..];
    }
    None
}

/// A neighbour solicitation for `target` from `src` (the router's address and MAC on the
/// port), to the target's solicited-node multicast address.
pub fn solicit(mac: Mac, src: u128, target: u128) -> Vec<u8> {
    let t = target.to_be_bytes();
    let group = (0xff02_u128 << 112) | (0x1_ff00_0000_u128) | (target & 0xff_ffff);
    let dst_mac = [0x33, 0x33, 0xff, t[13], t[14], t[15]];
    let mut body = t.to_vec();
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&mac.0);
    weir_wire::build::Builder::new()
        .macs(mac.0, dst_mac)
        .ttl(255)
        .icmp(
            std::net::Ipv6Addr::from(src),
            std::net::Ipv6Addr::from(group),
            135,
            0,
            0,
            &body,
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::{LinkType, PacketMeta};

    #[test]
    fn solicits_and_learns() {
        let mac = Mac([2, 0, 0, 0, 0, 9]);
        let me: u128 = 0x2001_0db8_0031_0000_0000_0000_0000_0001;
        let host: u128 = 0x2001_0db8_0031_0000_0000_0000_00ab_cdef;
        let ns = solicit(mac, me, host);
        // to the solicited-node group, hop limit 255, a valid ICMPv6 checksum
        assert_eq!(&ns[..6], &[0x33, 0x33, 0xff, 0xab, 0xcd, 0xef]);
        let pm = PacketMeta::parse(&ns, LinkType::Ethernet);
        assert_eq!(pm.daddr, 0xff02_0000_0000_0000_0000_0001_ffab_cdef);
        assert_eq!(ns[21], 255);
        let l4 = pm.l4_off as usize;
        let sum = weir_wire::checksum::checksum_with(
            weir_wire::checksum::pseudo_v6(
                me.to_be_bytes(),
                pm.daddr.to_be_bytes(),
                58,
                (ns.len() - l4) as u32,
            ),
            &ns[l4..],
        );
        assert_eq!(sum, 0);
        // what the router sends is what it learns from: the solicitation's source and MAC
        assert_eq!(sender(&ns), Some((Addr::v6(me), mac)));
        // an advertisement: the target and the target link-layer option
        let hmac = Mac([2, 0, 0, 0, 0, 7]);
        let na = advert(hmac, mac, host, me);
        assert_eq!(sender(&na), Some((Addr::v6(host), hmac)));
        // not with another hop limit (RFC 4861), nor without the option, nor cut short
        let mut hop = na.clone();
        hop[21] = 64;
        assert_eq!(sender(&hop), None);
        assert_eq!(sender(&na[..na.len() - 8]), None);
        assert_eq!(sender(&na[..60]), None);
    }

    /// A neighbour advertisement from `hmac` (`host`) to `mac` (`me`).
    pub(crate) fn advert(hmac: Mac, mac: Mac, host: u128, me: u128) -> Vec<u8> {
        let mut body = host.to_be_bytes().to_vec();
        body.extend_from_slice(&[2, 1]);
        body.extend_from_slice(&hmac.0);
        weir_wire::build::Builder::new()
            .macs(hmac.0, mac.0)
            .ttl(255)
            .icmp(
                std::net::Ipv6Addr::from(host),
                std::net::Ipv6Addr::from(me),
                136,
                0,
                0x6000_0000,
                &body,
            )
    }
}
