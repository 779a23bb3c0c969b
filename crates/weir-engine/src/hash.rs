//! Hashes for `jhash` and `symhash`: the kernel's jhash (Bob Jenkins' lookup2-style hash used
//! by nft_hash) over the key's bytes in network order, each component padded to 4 bytes as in
//! nftables registers; and a symmetric flow hash (same value for both directions).

use weir_lang::ir::KeyPart;
use weir_wire::PacketMeta;

const JHASH_INITVAL: u32 = 0xdead_beef;

#[inline]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

#[inline]
fn final_(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// The kernel's `jhash(key, length, initval)`.
pub fn jhash(key: &[u8], initval: u32) -> u32 {
    let mut length = key.len() as u32;
    let mut a = JHASH_INITVAL.wrapping_add(length).wrapping_add(initval);
    let mut b = a;
    let mut c = a;
    let mut k = key;
    let word = |s: &[u8]| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]);
    while length > 12 {
        a = a.wrapping_add(word(&k[0..4]));
        b = b.wrapping_add(word(&k[4..8]));
        c = c.wrapping_add(word(&k[8..12]));
        mix(&mut a, &mut b, &mut c);
        length -= 12;
        k = &k[12..];
    }
    let g = |i: usize| k[i] as u32;
    if length == 0 {
        return c;
    }
    if length >= 12 {
        c = c.wrapping_add(g(11) << 24);
    }
    if length >= 11 {
        c = c.wrapping_add(g(10) << 16);
    }
    if length >= 10 {
        c = c.wrapping_add(g(9) << 8);
    }
    if length >= 9 {
        c = c.wrapping_add(g(8));
    }
    if length >= 8 {
        b = b.wrapping_add(g(7) << 24);
    }
    if length >= 7 {
        b = b.wrapping_add(g(6) << 16);
    }
    if length >= 6 {
        b = b.wrapping_add(g(5) << 8);
    }
    if length >= 5 {
        b = b.wrapping_add(g(4));
    }
    if length >= 4 {
        a = a.wrapping_add(g(3) << 24);
    }
    if length >= 3 {
        a = a.wrapping_add(g(2) << 16);
    }
    if length >= 2 {
        a = a.wrapping_add(g(1) << 8);
    }
    a = a.wrapping_add(g(0));
    final_(&mut a, &mut b, &mut c);
    c
}

/// jhash of key values laid out as nftables registers: each component in network order in
/// ceil(bits/8) bytes, padded to a multiple of 4.
pub fn jhash_key(vals: &[u128], parts: &[KeyPart], seed: u32) -> u32 {
    let mut buf = [0u8; 128];
    let mut n = 0;
    for (v, p) in vals.iter().zip(parts) {
        let bytes = (p.dtype.bits() as usize).div_ceil(8).clamp(1, 16);
        let be = v.to_be_bytes();
        if n + bytes.div_ceil(4) * 4 > buf.len() {
            break;
        }
        buf[n..n + bytes].copy_from_slice(&be[16 - bytes..]);
        n += bytes.div_ceil(4) * 4;
    }
    jhash(&buf[..n], seed)
}

/// A symmetric hash of the flow: the same for both directions of a connection.
pub fn symhash(pm: &PacketMeta) -> u32 {
    let (a, b) = if pm.saddr <= pm.daddr {
        (pm.saddr, pm.daddr)
    } else {
        (pm.daddr, pm.saddr)
    };
    let (p, q) = if pm.has_ports {
        let (x, y) = (pm.sport, pm.dport);
        if (pm.saddr, x) <= (pm.daddr, y) {
            (x, y)
        } else {
            (y, x)
        }
    } else {
        (0, 0)
    };
    let mut buf = [0u8; 40];
    buf[..16].copy_from_slice(&a.to_be_bytes());
    buf[16..32].copy_from_slice(&b.to_be_bytes());
    buf[32..34].copy_from_slice(&p.to_be_bytes());
    buf[34..36].copy_from_slice(&q.to_be_bytes());
    buf[36] = pm.l4proto;
    jhash(&buf, 0x5eed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jhash_lengths_differ_and_are_stable() {
        // every tail length goes through a different path; the values must differ and not panic
        let data: Vec<u8> = (0u8..40).collect();
        let hs: Vec<u32> = (0..=40).map(|n| jhash(&data[..n], 0)).collect();
        let mut sorted = hs.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), hs.len());
        assert_eq!(jhash(&[], 0), JHASH_INITVAL);
    }
}
