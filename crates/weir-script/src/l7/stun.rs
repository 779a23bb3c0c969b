//! STUN (RFC 5389 and later): a 20-byte header with the magic cookie, the two top bits of
//! the type zero, a length that is a multiple of 4 and fits (nfqws2's `IsStunMessage`).

use super::{be16, be32};

/// The magic cookie every STUN message carries at offset 4.
pub const MAGIC_COOKIE: u32 = 0x2112_a442;

/// Whether `p` is a STUN message.
pub fn is_stun(p: &[u8]) -> bool {
    p.len() >= 20
        && p[0] & 0xc0 == 0
        && p[3] & 3 == 0
        && be32(p, 4) == Some(MAGIC_COOKIE)
        && be16(p, 2).is_some_and(|l| l <= p.len() - 20)
}
