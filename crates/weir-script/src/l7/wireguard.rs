//! WireGuard handshake messages, by their type (a little-endian u32: 1, 2, 3, 4 with three
//! reserved zero bytes) and their fixed lengths, as nfqws2 recognises them. Transport data
//! (type 4, longer than a keepalive) has no payload type of its own here.

use crate::payload::PayloadType;

/// The WireGuard message type of `p`, None if it is not one of the four.
pub fn detect(p: &[u8]) -> Option<PayloadType> {
    let head = p.get(..4)?;
    Some(match (head, p.len()) {
        ([1, 0, 0, 0], 148) => PayloadType::WireguardInitiation,
        ([2, 0, 0, 0], 92) => PayloadType::WireguardResponse,
        ([3, 0, 0, 0], 64) => PayloadType::WireguardCookie,
        ([4, 0, 0, 0], 32) => PayloadType::WireguardKeepalive,
        _ => return None,
    })
}
