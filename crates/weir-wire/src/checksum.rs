//! The Internet checksum: full computation (RFC 1071) and incremental update (RFC 1624).
//!
//! A checksum is the ones' complement of the ones' complement sum of 16-bit big-endian words.
//! [`sum`] accumulates a partial sum (odd trailing byte padded with zero), [`fold`] folds it to
//! 16 bits, [`checksum`] gives the value to store. Pseudo-headers for TCP/UDP/ICMPv6 are
//! [`pseudo_v4`] / [`pseudo_v6`]; add them to the sum of the transport segment.
//!
//! When a rewrite changes a field (NAT changes an address or a port), the stored checksum is
//! updated from the old and new values with RFC 1624 equation 3, `HC' = ~(~HC + ~m + m')`,
//! without reading the rest of the packet: [`update16`], [`update32`], [`update128`],
//! [`update_bytes`]. For UDP over IPv4 a stored checksum of 0 means "none" and must stay 0, and
//! a computed 0 is sent as 0xffff: wrap the update in [`udp_update`].

/// Ones' complement partial sum of `data` as big-endian 16-bit words (an odd last byte is
/// padded with a zero byte). Accumulates in 64 bits; fold with [`fold`].
pub fn sum(data: &[u8]) -> u64 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Add the four 16-bit words of w; 2 x 32-bit halves keep carries in the 64-bit sum.
        acc += (w >> 32) + (w & 0xffff_ffff);
    }
    let rest = chunks.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u16::from_be_bytes([p[0], p[1]]) as u64;
    }
    if let [last] = pairs.remainder() {
        acc += (*last as u64) << 8;
    }
    acc
}

/// Fold a partial sum to 16 bits with end-around carry (not complemented): 0 only for 0.
///
/// Four fixed steps, no loop: a loop's trip count depends on the data, so its exit branch
/// mispredicts on every other packet (the flowtable's fast path, which asks whether each
/// frame's checksum is partial, forwarded 5% more packets per second without it: `weir
/// bench pipeline`). Each step keeps the value modulo 0xffff (2^16 and 2^32 are 1 there):
/// under 2^33, then 2^18, then 65,539, then at most 0xffff.
#[inline]
pub fn fold(acc: u64) -> u16 {
    let a = (acc & 0xffff_ffff) + (acc >> 32);
    let a = (a & 0xffff) + (a >> 16);
    let a = (a & 0xffff) + (a >> 16);
    ((a & 0xffff) + (a >> 16)) as u16
}

/// The checksum to store over `data` (whose checksum field is zero). Verifying: the checksum of
/// data that includes a correct checksum field is 0.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// Checksum of several pieces (e.g. pseudo-header sum plus a segment).
pub fn checksum_with(initial: u64, data: &[u8]) -> u16 {
    !fold(initial + sum(data))
}

/// Partial sum of the IPv4 pseudo-header (RFC 793 / 768).
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> u64 {
    sum(&src) + sum(&dst) + proto as u64 + len as u64
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 section 8.1).
pub fn pseudo_v6(src: [u8; 16], dst: [u8; 16], proto: u8, len: u32) -> u64 {
    sum(&src) + sum(&dst) + (len >> 16) as u64 + (len & 0xffff) as u64 + proto as u64
}

/// RFC 1624 eqn. 3 for one 16-bit word: the new checksum when a covered word changes from
/// `old` to `new`.
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    !fold(!csum as u64 + !old as u64 + new as u64)
}

/// RFC 1624 for a 32-bit field (an IPv4 address, a TCP sequence number) at an even offset.
pub fn update32(csum: u16, old: u32, new: u32) -> u16 {
    let acc = !csum as u64
        + (!(old >> 16) & 0xffff) as u64
        + (!old & 0xffff) as u64
        + (new >> 16) as u64
        + (new & 0xffff) as u64;
    !fold(acc)
}

/// RFC 1624 for a 128-bit field (an IPv6 address) at an even offset.
pub fn update128(csum: u16, old: u128, new: u128) -> u16 {
    let mut acc = !csum as u64;
    for i in 0..8 {
        let sh = 112 - 16 * i;
        acc += (!(old >> sh) as u16) as u64;
        acc += ((new >> sh) as u16) as u64;
    }
    !fold(acc)
}

/// RFC 1624 for a byte range at an even offset: `old` and `new` have the same length (an odd
/// length means the last byte is the high byte of a word whose low byte did not change).
pub fn update_bytes(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    // ~sum(old) as ones' complement: subtracting sum(old) = adding its complement.
    let acc = !csum as u64 + !fold(sum(old)) as u64 + sum(new);
    !fold(acc)
}

/// Apply an update to a UDP-over-IPv4 checksum: 0 ("no checksum") stays 0, and a result of 0
/// is stored as 0xffff. (UDP over IPv6 must always carry a checksum, so the same rule holds.)
pub fn udp_update(csum: u16, f: impl FnOnce(u16) -> u16) -> u16 {
    if csum == 0 {
        return 0;
    }
    match f(csum) {
        0 => 0xffff,
        c => c,
    }
}

/// The checksum field value for a UDP datagram computed with [`checksum_with`]: 0 is sent as
/// 0xffff (RFC 768).
pub fn udp_final(c: u16) -> u16 {
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// The IPv4 header checksum after a TTL decrement, as Linux's `ip_decrease_ttl` computes it on
/// a little-endian CPU: the checksum's raw 16-bit value plus `htons(0x0100)`, plus one on carry
/// past 0xfffe (so 0xffff never appears). It agrees with [`update16`] except for which of the
/// two one's-complement zeros it gives; routers that forward as the kernel does use this one.
pub fn ttl_decrement(check_be: u16) -> u16 {
    let raw = check_be.swap_bytes() as u32; // the u16 as a little-endian CPU loads it
    let mut c = raw + 0x0100u16.to_be() as u32;
    c += (c >= 0xffff) as u32;
    (c as u16).swap_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain reference: word by word, folding at each step.
    fn reference(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], 0])
            };
            acc += w as u32;
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn ipv4_header_known_value() {
        // A classic example header; checksum b861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10] = 0xb8;
        h[11] = 0x61;
        assert_eq!(checksum(&h), 0);
    }

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// The branchless fold against the plain loop (fold until 16 bits), at the edges of each
    /// step and on random sums of every size.
    #[test]
    fn fold_matches_the_loop() {
        fn looped(mut a: u64) -> u16 {
            while a > 0xffff {
                a = (a & 0xffff) + (a >> 16);
            }
            a as u16
        }
        let mut edges = vec![0, 1, u64::MAX, u64::MAX - 1];
        for b in [16u32, 17, 18, 32, 33, 48, 63] {
            let p = 1u64 << b;
            edges.extend([p - 2, p - 1, p, p + 1]);
        }
        edges.extend([
            0xffff,
            0x1fffe,
            0xffff_ffff,
            0x1_fffe_fffe,
            0xffff_0000_ffff,
        ]);
        let mut s = 11u64;
        for _ in 0..100_000 {
            let bits = lcg(&mut s) % 65;
            let x = (lcg(&mut s) << 33) ^ lcg(&mut s) ^ (lcg(&mut s) << 62);
            edges.push(if bits == 64 {
                x
            } else {
                x & ((1u64 << bits) - 1)
            });
        }
        for a in edges {
            assert_eq!(fold(a), looped(a), "{a:#x}");
        }
    }

    #[test]
    fn sum_matches_reference_all_lengths() {
        let mut s = 7u64;
        for len in 0..200 {
            let d: Vec<u8> = (0..len).map(|_| lcg(&mut s) as u8).collect();
            assert_eq!(checksum(&d), reference(&d), "len {len}");
        }
        // All 0xff: the sum is "negative zero".
        let d = [0xffu8; 64];
        assert_eq!(checksum(&d), reference(&d));
    }

    /// Change bytes at an even offset in random data and compare the incremental update with
    /// a full recomputation.
    fn check_update(width: usize, upd: impl Fn(u16, &[u8], &[u8]) -> u16) {
        let mut s = 42u64;
        for round in 0..2000 {
            let len = 2 * (width / 2 + 1 + (lcg(&mut s) as usize % 40));
            let mut d: Vec<u8> = (0..len).map(|_| lcg(&mut s) as u8).collect();
            if round % 7 == 0 {
                d.iter_mut().for_each(|b| *b = 0xff);
            }
            let at = 2 * (lcg(&mut s) as usize % ((len - width) / 2 + 1));
            let before = checksum(&d);
            let old = d[at..at + width].to_vec();
            let new: Vec<u8> = if round % 5 == 0 {
                vec![0; width]
            } else {
                (0..width).map(|_| lcg(&mut s) as u8).collect()
            };
            d[at..at + width].copy_from_slice(&new);
            let full = checksum(&d);
            let inc = upd(before, &old, &new);
            assert_eq!(inc, full, "round {round} width {width} at {at}");
            // The updated checksum verifies like a fresh one: data + checksum sums to -0.
            let mut with = d.clone();
            with.extend_from_slice(&inc.to_be_bytes());
            assert_eq!(checksum(&with), 0);
        }
    }

    #[test]
    fn update16_matches_recompute() {
        check_update(2, |c, o, n| {
            update16(
                c,
                u16::from_be_bytes([o[0], o[1]]),
                u16::from_be_bytes([n[0], n[1]]),
            )
        });
    }

    #[test]
    fn update32_matches_recompute() {
        check_update(4, |c, o, n| {
            update32(
                c,
                u32::from_be_bytes(o.try_into().unwrap()),
                u32::from_be_bytes(n.try_into().unwrap()),
            )
        });
    }

    #[test]
    fn update128_matches_recompute() {
        check_update(16, |c, o, n| {
            update128(
                c,
                u128::from_be_bytes(o.try_into().unwrap()),
                u128::from_be_bytes(n.try_into().unwrap()),
            )
        });
    }

    #[test]
    fn update_bytes_matches_recompute() {
        check_update(6, update_bytes);
        check_update(16, update_bytes);
    }

    #[test]
    fn udp_zero_rules() {
        assert_eq!(udp_update(0, |c| update16(c, 1, 2)), 0);
        // Find a change that makes the checksum 0 and see it stored as 0xffff.
        let c = 0x1234u16;
        let new = update16(c, 0, 0);
        assert_eq!(new, c);
        let z = udp_update(0xffff, |_| 0);
        assert_eq!(z, 0xffff);
        assert_eq!(udp_final(0), 0xffff);
        assert_eq!(udp_final(7), 7);
    }

    #[test]
    fn ttl_decrement_is_the_kernels() {
        // agrees with a full recomputation except for the one's-complement zero it never makes
        for c in [0x0000u16, 0x1234, 0xfeff, 0xff00, 0xfffe, 0xffff, 0x00ff] {
            let k = ttl_decrement(c);
            let rfc = update16(c, 0x4006, 0x3f06);
            assert!(
                k == rfc || (k == 0 && rfc == 0xffff) || (k == 0xffff && rfc == 0),
                "{c:04x}: {k:04x} vs {rfc:04x}"
            );
            assert_ne!(k, 0xffff);
        }
    }
}
