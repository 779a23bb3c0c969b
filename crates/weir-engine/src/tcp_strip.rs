//! TCP option writes.
//!
//! `tcp option KIND FIELD set VALUE` (nft_exthdr_tcp_set_eval; `tcp option maxseg size set rt
//! mtu`, MSS clamping): the field (2 or 4 bytes) of the first option of that kind is written,
//! the checksum updated; an MSS is only ever lowered ("an increase can stall the connection");
//! the rule stops without a TCP header or when the field lies beyond the option or the header.
//! The check runs with the statement ([`can_set`]), the write with the chain's other header
//! writes ([`set`]).
//!
//! `reset tcp option KIND` (nft_exthdr_tcp_strip_eval): the first option of that kind in the
//! TCP header is overwritten with NOPs, the TCP checksum updated for each byte. The rule
//! stops (NFT_BREAK) where the kernel cannot read the TCP header (another protocol, a later
//! fragment, a data offset below 5 or past the packet); an option of the kind that runs past
//! the header drops the packet; no such option: nothing is done, the rule goes on.
//!
//! The check runs when the statement does ([`check`]); the bytes are written with the other
//! header writes when the base chain ends ([`strip`], from [`crate::nat::set_header_field`]
//! with `Field::TcpOption`). Until then, a later `tcp option KIND` read of the same chain finds
//! that kind missing.

use weir_wire::PacketMeta;

/// What the statement does to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strip {
    /// No TCP header to read: the rule stops.
    Break,
    /// The option runs past the header: the packet is dropped.
    Drop,
    /// No option of the kind: nothing to do.
    Absent,
    /// The option found: it will be stripped.
    Found,
}

/// The TCP header's offset and length, as nft_tcp_header_pointer reads them.
fn header(frame: &[u8], pm: &PacketMeta) -> Option<(usize, usize)> {
    if !pm.has_l4 || !pm.l3_ok() || pm.l4proto != 6 {
        return None;
    }
    let l4 = pm.l4_off as usize;
    let end = pm.l3_end().min(frame.len());
    let hlen = (*frame.get(l4 + 12)? >> 4) as usize * 4;
    (hlen >= 20 && l4 + hlen <= end).then_some((l4, hlen))
}

/// The first option of `kind`: its offset in the header and its length (the kernel's walk:
/// EOL, NOP and a length of 0 count one byte; the header's last byte is not looked at).
fn find(opt: &[u8], kind: u8) -> Option<(usize, usize)> {
    let hlen = opt.len();
    let mut i = 20;
    while i + 1 < hlen {
        let l = if opt[i] <= 1 || opt[i + 1] == 0 {
            1
        } else {
            opt[i + 1] as usize
        };
        if opt[i] == kind {
            return Some((i, l));
        }
        i += l;
    }
    None
}

/// A `reset tcp option KIND` of the chain is waiting to be written.
pub(crate) fn pending(meta: &crate::eval::Meta, kind: u8) -> bool {
    meta.nwrites > 0
        && meta.writes[..meta.nwrites as usize]
            .iter()
            .flatten()
            .any(|(f, v)| *f == weir_wire::Field::TcpOption && *v == kind as u128)
}

/// What `reset tcp option KIND` does to this packet.
pub(crate) fn check(frame: &[u8], pm: &PacketMeta, kind: u8) -> Strip {
    let Some((l4, hlen)) = header(frame, pm) else {
        return Strip::Break;
    };
    match find(&frame[l4..l4 + hlen], kind) {
        None => Strip::Absent,
        Some((i, l)) if i + l > hlen => Strip::Drop,
        Some(_) => Strip::Found,
    }
}

/// Overwrite the first option of `kind` with NOPs and update the TCP checksum. False when
/// there is nothing to strip.
pub(crate) fn strip(frame: &mut [u8], pm: &PacketMeta, kind: u8) -> bool {
    let Some((l4, hlen)) = header(frame, pm) else {
        return false;
    };
    let Some((i, l)) = find(&frame[l4..l4 + hlen], kind) else {
        return false;
    };
    if i + l > hlen {
        return false;
    }
    let mut csum = u16::from_be_bytes([frame[l4 + 16], frame[l4 + 17]]);
    for j in i..i + l {
        // each byte as its half of a 16-bit word of the header (inet_proto_csum_replace2)
        let (o, n) = (frame[l4 + j] as u16, 1u16);
        let (o, n) = if j % 2 == 0 { (o << 8, n << 8) } else { (o, n) };
        csum = weir_wire::checksum::update16(csum, o, n);
        frame[l4 + j] = 1;
    }
    frame[l4 + 16..l4 + 18].copy_from_slice(&csum.to_be_bytes());
    true
}

/// Whether `tcp option KIND FIELD set` may go on with this packet (else the rule stops).
pub(crate) fn can_set(frame: &[u8], pm: &PacketMeta, kind: u8, offset: u8, len: u8) -> bool {
    let Some((l4, hlen)) = header(frame, pm) else {
        return false;
    };
    match find(&frame[l4..l4 + hlen], kind) {
        None => true,
        Some((i, l)) => i + l <= hlen && (offset + len) as usize <= l,
    }
}

/// A write's kind, offset, length and value in one `u128` (a header write's value).
pub(crate) fn pack(kind: u8, offset: u8, len: u8, value: u128) -> u128 {
    (value & 0xffff_ffff) | (kind as u128) << 32 | (offset as u128) << 40 | (len as u128) << 48
}

/// Write a TCP option's field (see the module docs). Whether the packet changed.
pub(crate) fn set(frame: &mut [u8], pm: &PacketMeta, packed: u128) -> bool {
    let (kind, offset, len) = (
        (packed >> 32) as u8,
        (packed >> 40) as u8 as usize,
        (packed >> 48) as u8 as usize,
    );
    let value = packed as u32;
    let Some((l4, hlen)) = header(frame, pm) else {
        return false;
    };
    let Some((i, l)) = find(&frame[l4..l4 + hlen], kind) else {
        return false;
    };
    if i + l > hlen || offset + len > l {
        return false;
    }
    let at = l4 + i + offset;
    let mut csum = u16::from_be_bytes([frame[l4 + 16], frame[l4 + 17]]);
    match len {
        2 => {
            let old = u16::from_be_bytes([frame[at], frame[at + 1]]);
            let new = value as u16;
            // an MSS only ever lowered; the same value: nothing to do
            if (kind == 2 && old <= new) || old == new {
                return false;
            }
            frame[at..at + 2].copy_from_slice(&new.to_be_bytes());
            // an odd offset straddles two 16-bit words of the checksum
            if (at - l4) % 2 == 0 {
                csum = weir_wire::checksum::update16(csum, old, new);
            } else {
                {
                    // an odd offset straddles two 16-bit words: the checksum afresh
                    crate::stateful::finish_transport(frame, pm);
                    return true;
                }
            }
        }
        4 => {
            let old = u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
            if old == value {
                return false;
            }
            frame[at..at + 4].copy_from_slice(&value.to_be_bytes());
            if (at - l4) % 2 == 0 {
                csum = weir_wire::checksum::update32(csum, old, value);
            } else {
                {
                    // an odd offset straddles two 16-bit words: the checksum afresh
                    crate::stateful::finish_transport(frame, pm);
                    return true;
                }
            }
        }
        _ => return false,
    }
    frame[l4 + 16..l4 + 18].copy_from_slice(&csum.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::build::Builder;
    use weir_wire::LinkType;

    fn tcp(opts: &[u8]) -> Vec<u8> {
        let doff = (20 + opts.len()) / 4;
        let mut h = vec![0x03, 0xe8, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0];
        h.extend([(doff as u8) << 4, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        h.extend(opts);
        let (a, b) = ([198, 18, 0, 1], [198, 18, 0, 2]);
        let mut f = Builder::raw().ip(
            std::net::Ipv4Addr::from(a),
            std::net::Ipv4Addr::from(b),
            6,
            &h,
        );
        // a valid checksum to start from
        let l4 = f.len() - h.len();
        let ps = weir_wire::checksum::pseudo_v4(a, b, 6, h.len() as u16);
        let c = weir_wire::checksum::checksum_with(ps, &f[l4..]);
        f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        f
    }

    #[test]
    fn strips_the_first_option_with_a_valid_checksum() {
        // MSS, then SACK permitted twice
        let mut f = tcp(&[2, 4, 0x05, 0xb4, 4, 2, 4, 2]);
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(pm.transport_checksum_ok(&f), "checksum before");
        assert_eq!(check(&f, &pm, 4), Strip::Found);
        assert_eq!(check(&f, &pm, 8), Strip::Absent);
        assert!(strip(&mut f, &pm, 4));
        let l4 = pm.l4_off as usize;
        assert_eq!(&f[l4 + 20..], &[2, 4, 0x05, 0xb4, 1, 1, 4, 2]);
        assert!(strip(&mut f, &pm, 2));
        assert_eq!(&f[l4 + 20..], &[1, 1, 1, 1, 1, 1, 4, 2]);
        // the checksum still verifies
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(pm.transport_checksum_ok(&f), "checksum");
    }

    #[test]
    fn breaks_and_drops_as_the_kernel() {
        let f = tcp(&[1, 1, 1, 1, 1, 1, 2, 4]);
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert_eq!(check(&f, &pm, 2), Strip::Drop);
        let a = std::net::Ipv4Addr::new(198, 18, 0, 1);
        let u = Builder::raw().ip(a, a, 17, &[0, 1, 0, 2, 0, 8, 0, 0]);
        let pm = PacketMeta::parse(&u, LinkType::RawIp);
        assert_eq!(check(&u, &pm, 2), Strip::Break);
    }

    #[test]
    fn mss_is_clamped_down_only() {
        let mut f = tcp(&[1, 2, 4, 0x05, 0xb4, 1, 1, 1]); // NOP, MSS 1460 at an odd offset
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        let l4 = pm.l4_off as usize;
        assert!(can_set(&f, &pm, 2, 2, 2));
        assert!(!set(&mut f, &pm, pack(2, 2, 2, 1500)), "not raised");
        assert!(!set(&mut f, &pm, pack(2, 2, 2, 1460)), "the same");
        assert!(set(&mut f, &pm, pack(2, 2, 2, 1400)));
        assert_eq!(&f[l4 + 20..l4 + 25], &[1, 2, 4, 0x05, 0x78]);
        assert!(PacketMeta::parse(&f, LinkType::RawIp).transport_checksum_ok(&f));
        // an even offset: the checksum updated in place
        let mut f = tcp(&[2, 4, 0x05, 0xb4, 1, 1, 1, 1]);
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(set(&mut f, &pm, pack(2, 2, 2, 1360)));
        assert!(PacketMeta::parse(&f, LinkType::RawIp).transport_checksum_ok(&f));
        // a 4-byte field (a timestamp's value) may rise or fall
        let mut f = tcp(&[8, 10, 0, 0, 0, 5, 0, 0, 0, 6, 1, 1]);
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(set(&mut f, &pm, pack(8, 2, 4, 99)));
        assert!(PacketMeta::parse(&f, LinkType::RawIp).transport_checksum_ok(&f));
        // no MSS option: nothing, the rule goes on; a field beyond the option: the rule stops
        let mut f = tcp(&[1, 1, 1, 1]);
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(can_set(&f, &pm, 2, 2, 2));
        assert!(!set(&mut f, &pm, pack(2, 2, 2, 1200)));
        let f = tcp(&[2, 3, 0, 1]);
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert!(!can_set(&f, &pm, 2, 2, 2));
    }
}
