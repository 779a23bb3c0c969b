//! SYN cookies (RFC 4987), laid out as Linux lays them (`secure_tcp_syn_cookie`): the
//! client's initial sequence number, a keyed hash of the connection's addresses and ports,
//! the minute the cookie was made (top 8 bits) and, in the low 24 bits under a second hash
//! that includes the minute, the index of the MSS the client asked for in a table of four.
//! A cookie is good for the minute it was made and the next (`MAX_SYNCOOKIE_AGE` 2).
//!
//! The hash is SipHash with a key drawn at random once per process (std's `RandomState`),
//! shared by every worker: an ACK proves its cookie whichever worker takes it.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

const COOKIE_BITS: u32 = 24;
const COOKIE_MASK: u32 = (1 << COOKIE_BITS) - 1;
/// Minutes a cookie stays good after the one it was made in, plus one.
const MAX_AGE: u32 = 2;

/// The MSS values a cookie can carry (Linux's `msstab`), for IPv4 and IPv6.
pub const MSS_V4: [u16; 4] = [536, 1300, 1440, 1460];
pub const MSS_V6: [u16; 4] = [1220, 1420, 1440, 8940];

/// The connection a cookie is for, as the client's packets carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    pub src: u128,
    pub dst: u128,
    pub sport: u16,
    pub dport: u16,
    pub v6: bool,
}

fn keys() -> &'static [RandomState; 2] {
    static K: OnceLock<[RandomState; 2]> = OnceLock::new();
    K.get_or_init(|| [RandomState::new(), RandomState::new()])
}

fn hash(k: usize, f: &Flow, minute: u32) -> u32 {
    let mut h = keys()[k].build_hasher();
    h.write_u128(f.src);
    h.write_u128(f.dst);
    h.write_u16(f.sport);
    h.write_u16(f.dport);
    h.write_u32(minute);
    h.finish() as u32
}

fn table(v6: bool) -> &'static [u16; 4] {
    if v6 {
        &MSS_V6
    } else {
        &MSS_V4
    }
}

/// The cookie for a SYN whose sequence number is `seq`, asking for `mss` (0: none), made in
/// minute `minute`; and the MSS the cookie carries (the largest of the table not above the
/// client's, the smallest when none is).
pub fn make(f: &Flow, seq: u32, mss: u16, minute: u32) -> (u32, u16) {
    let tab = table(f.v6);
    let mut i = tab.len() - 1;
    while i > 0 && mss < tab[i] {
        i -= 1;
    }
    let cookie = hash(0, f, 0)
        .wrapping_add(seq)
        .wrapping_add(minute << COOKIE_BITS)
        .wrapping_add(hash(1, f, minute).wrapping_add(i as u32) & COOKIE_MASK);
    (cookie, tab[i])
}

/// The MSS an ACK's cookie carries (`cookie`: its acknowledgement number less one, `seq`:
/// its sequence number less one), or None when the cookie is not one of ours or too old.
pub fn check(f: &Flow, seq: u32, cookie: u32, minute: u32) -> Option<u16> {
    let c = cookie.wrapping_sub(hash(0, f, 0)).wrapping_sub(seq);
    let age = minute.wrapping_sub(c >> COOKIE_BITS) & (u32::MAX >> COOKIE_BITS);
    if age >= MAX_AGE {
        return None;
    }
    let i = c.wrapping_sub(hash(1, f, minute.wrapping_sub(age))) & COOKIE_MASK;
    table(f.v6).get(i as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(sport: u16) -> Flow {
        Flow {
            src: 0xc612_0002,
            dst: 0xc613_0002,
            sport,
            dport: 80,
            v6: false,
        }
    }

    #[test]
    fn a_cookie_carries_the_mss_and_proves_itself_for_two_minutes() {
        let f = flow(40000);
        for (asked, got) in [
            (1460, 1460),
            (1500, 1460),
            (1400, 1300),
            (0, 536),
            (536, 536),
        ] {
            let (c, mss) = make(&f, 1000, asked, 50);
            assert_eq!(mss, got);
            assert_eq!(check(&f, 1000, c, 50), Some(got));
            assert_eq!(check(&f, 1000, c, 51), Some(got));
            assert_eq!(check(&f, 1000, c, 52), None, "too old");
            // (as Linux's: a sequence number a few off moves the index within the table; far
            // off, out of it)
            assert_eq!(
                check(&f, 1000 + 4096, c, 50),
                None,
                "another sequence number"
            );
            assert_eq!(check(&flow(40001), 1000, c, 50), None, "another port");
            assert_eq!(check(&f, 1000, c ^ 0x0012_3400, 50), None, "changed");
        }
        let v6 = Flow { v6: true, ..f };
        let (c, mss) = make(&v6, 7, 9000, 3);
        assert_eq!((mss, check(&v6, 7, c, 4)), (8940, Some(8940)));
    }

    #[test]
    fn forged_cookies_rarely_pass() {
        let f = flow(40000);
        let pass = (0..100_000u32)
            .filter(|&c| check(&f, 1000, c.wrapping_mul(2_654_435_761), 50).is_some())
            .count();
        // 4 good values in 2^24 for each of 2 minutes: about 5 in 100,000 at random
        assert!(pass < 60, "{pass}");
    }
}
