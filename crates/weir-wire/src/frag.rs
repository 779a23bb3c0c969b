//! IPv4 fragmentation on output (RFC 791, as Linux's `ip_do_fragment`): a router forwarding
//! a datagram larger than the next link's MTU, without "don't fragment", sends it in pieces.
//! (IPv6 routers never fragment: the sender gets ICMPv6 "packet too big".)

use crate::checksum::checksum;

/// Cut the IPv4 packet of `frame` (IP header at `l3`; what comes before is the link header,
/// copied into every piece) into frames whose IP packets are at most `mtu` bytes. An already
/// fragmented packet is cut further (offsets add up, the last piece keeps "more fragments"
/// as the packet had it). Options: the first piece keeps them all; in the others, options
/// without the "copied" flag become NOPs (the header keeps its length), as
/// `ip_options_fragment` does. Link padding after the IP packet is dropped.
///
/// None if the packet cannot be cut: not IPv4, "don't fragment" set, a malformed header or
/// option list, or an MTU that leaves less than 8 bytes of payload per piece.
pub fn fragment_ipv4(frame: &[u8], l3: usize, mtu: usize) -> Option<Vec<Vec<u8>>> {
    let ip = frame.get(l3..)?;
    let b0 = *ip.first()?;
    let hlen = ((b0 & 0x0f) as usize) * 4;
    if b0 >> 4 != 4 || hlen < 20 || ip.len() < hlen {
        return None;
    }
    let tot = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    if tot < hlen || tot > ip.len() {
        return None;
    }
    let fw = u16::from_be_bytes([ip[6], ip[7]]);
    if fw & 0x4000 != 0 {
        return None;
    }
    let step = mtu.checked_sub(hlen)? & !7;
    if step < 8 {
        return None;
    }
    // the header of the pieces after the first: options not to be copied become NOPs
    let mut later = ip[..hlen].to_vec();
    let mut i = 20;
    while i < hlen {
        match later[i] {
            0 => break,
            1 => i += 1,
            t => {
                let len = *later.get(i + 1)? as usize;
                if len < 2 || i + len > hlen {
                    return None;
                }
                if t & 0x80 == 0 {
                    later[i..i + len].fill(1);
                }
                i += len;
            }
        }
    }
    let base = (fw & 0x1fff) as usize * 8;
    let more = fw & 0x2000 != 0;
    let keep = fw & 0x8000;
    let payload = &ip[hlen..tot];
    let mut out = Vec::with_capacity(payload.len().div_ceil(step));
    let mut pos = 0;
    loop {
        let n = step.min(payload.len() - pos);
        let last = pos + n >= payload.len();
        let hdr = if pos == 0 { &ip[..hlen] } else { &later[..] };
        let mut f = Vec::with_capacity(l3 + hlen + n);
        f.extend_from_slice(&frame[..l3]);
        f.extend_from_slice(hdr);
        f.extend_from_slice(&payload[pos..pos + n]);
        let h = &mut f[l3..l3 + hlen];
        h[2..4].copy_from_slice(&((hlen + n) as u16).to_be_bytes());
        let off = (base + pos) / 8;
        if off > 0x1fff {
            return None;
        }
        let flags = keep | if !last || more { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&(flags | off as u16).to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        out.push(f);
        pos += n;
        if last {
            break;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::Builder;
    use crate::{Frag, LinkType, PacketMeta};
    use std::net::Ipv4Addr;

    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);

    /// The pieces' payloads at their offsets, and their flags; every header checksum checked.
    fn pieces(fs: &[Vec<u8>], mtu: usize) -> (Vec<u8>, Vec<(usize, bool)>) {
        let mut data = Vec::new();
        let mut at = Vec::new();
        for f in fs {
            let pm = PacketMeta::parse(f, LinkType::Ethernet);
            assert!(pm.malformed.is_none(), "{:?}", pm.malformed);
            assert!(pm.l3_len as usize <= mtu);
            assert_eq!(f.len(), 14 + pm.l3_len as usize);
            let h = (f[14] & 15) as usize * 4;
            assert_eq!(checksum(&f[14..14 + h]), 0);
            let fw = u16::from_be_bytes([f[20], f[21]]);
            let off = (fw & 0x1fff) as usize * 8;
            at.push((off, fw & 0x2000 != 0));
            assert_eq!(
                u16::from_be_bytes([f[18], f[19]]),
                0x4242,
                "identification kept"
            );
            data.extend_from_slice(&f[14 + h..]);
        }
        (data, at)
    }

    #[test]
    fn cut_and_put_back() {
        let body: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let f = Builder::new().ip_id(0x4242).udp(A, B, 1, 2, &body);
        let fs = fragment_ipv4(&f, 14, 1400).unwrap();
        assert_eq!(fs.len(), 3);
        let (data, at) = pieces(&fs, 1400);
        assert_eq!(data, f[34..].to_vec(), "the payload, in order");
        assert_eq!(at, vec![(0, true), (1376, true), (2752, false)]);
        let pm = PacketMeta::parse(&fs[0], LinkType::Ethernet);
        assert_eq!((pm.frag, pm.sport, pm.dport), (Frag::First, 1, 2));
        assert_eq!(&fs[1][..14], &f[..14], "the link header in every piece");
        // don't fragment: refused; an MTU with no room: refused
        let df = Builder::new().dont_fragment().udp(A, B, 1, 2, &body);
        assert!(fragment_ipv4(&df, 14, 1400).is_none());
        assert!(fragment_ipv4(&f, 14, 27).is_none());
        assert!(fragment_ipv4(&f[..100], 14, 68).is_none(), "cut short");
    }

    #[test]
    fn a_fragment_cut_again_keeps_its_offset_and_more_flag() {
        let f = Builder::new()
            .ip_id(0x4242)
            .fragment(100, true)
            .ip(A, B, 17, &[9u8; 1000]);
        let fs = fragment_ipv4(&f, 14, 576).unwrap();
        let (data, at) = pieces(&fs, 576);
        assert_eq!(data, vec![9u8; 1000]);
        assert_eq!(at, vec![(800, true), (1352, true)]);
    }

    #[test]
    fn options_not_copied_become_nops() {
        // record route (7, not copied), then router alert (148, copied)
        let opts = [7, 7, 4, 0, 0, 0, 0, 148, 4, 0, 0, 0];
        let f = Builder::new()
            .ip_id(0x4242)
            .ipv4_options(&opts)
            .udp(A, B, 1, 2, &[5u8; 600]);
        let fs = fragment_ipv4(&f, 14, 300).unwrap();
        let (data, _) = pieces(&fs, 300);
        assert_eq!(data, f[14 + 32..].to_vec());
        assert_eq!(&fs[0][34..46], &opts);
        for g in &fs[1..] {
            assert_eq!(&g[34..46], &[1, 1, 1, 1, 1, 1, 1, 148, 4, 0, 0, 0]);
        }
        // a broken option list is not cut
        let mut bad = f.clone();
        bad[35] = 40;
        assert!(fragment_ipv4(&bad, 14, 300).is_none());
    }
}
