//! The small detectors, as nfqws2 has them: XMPP stream elements, the BitTorrent handshake
//! (over TCP and over uTP), BitTorrent DHT (bencoded KRPC), Discord voice IP discovery and
//! Telegram's MTProto obfuscated initial packet (decrypted with AES-256-CTR from its own
//! key and IV: bytes 56..60 read 0xEFEFEFEF).

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes256;

use crate::payload::PayloadType;

/// An XMPP stream element: `<stream:stream`, `<starttls`, `<proceed`, `<stream:features`.
pub fn detect_xmpp(p: &[u8]) -> Option<PayloadType> {
    const STREAM: &[u8] = b"<stream:stream ";
    let stream = (p.len() >= 16 && p.starts_with(STREAM))
        || (p.len() >= 36
            && p.starts_with(b"<?xml ")
            && p[21..].windows(STREAM.len()).any(|w| w == STREAM));
    if stream {
        return Some(PayloadType::XmppStream);
    }
    if p.len() >= 10 && p.starts_with(b"<starttls ") {
        return Some(PayloadType::XmppStarttls);
    }
    if p.len() >= 9 && p.starts_with(b"<proceed ") {
        return Some(PayloadType::XmppProceed);
    }
    if p.len() >= 17 && p.starts_with(b"<stream:features") {
        return Some(PayloadType::XmppFeatures);
    }
    None
}

/// The BitTorrent protocol string with its length byte.
const BT: &[u8] = b"\x13BitTorrent protocol";

/// A BitTorrent handshake: protocol string, reserved bytes, info hash, peer id.
pub fn is_bt_handshake(p: &[u8]) -> bool {
    p.len() >= 1 + 19 + 8 + 20 + 20 && p.starts_with(BT)
}

/// A BitTorrent handshake over uTP: a 20-byte uTP header of type ST_DATA (version 1, first
/// byte 0x01) then the handshake.
pub fn is_utp_bt_handshake(p: &[u8]) -> bool {
    p.len() >= 20 + 1 + 19 + 8 + 20 + 20 && p[0] == 0x01 && p[20..].starts_with(BT)
}

/// A DHT KRPC message: a bencoded dictionary whose first key is `a`, `r`, `e` (a dictionary
/// or list follows) or `ip`.
pub fn is_dht(p: &[u8]) -> bool {
    p.len() >= 5
        && p[0] == b'd'
        && p[2] == b':'
        && p[p.len() - 1] == b'e'
        && matches!(
            (p[1], p[3], p[4]),
            (b'1', b'a', b'd') | (b'1', b'r', b'd') | (b'2', b'i', b'p') | (b'1', b'e', b'l')
        )
}

/// A Discord IP discovery request: 74 bytes, type 1, length 70, address all zero.
pub fn is_discord_ip_discovery(p: &[u8]) -> bool {
    p.len() == 74 && p[..4] == [0, 1, 0, 70] && p[8..72].iter().all(|&b| b == 0)
}

/// An MTProto obfuscated initial packet (64 bytes or more). nfqws2 tries it only on a TCP
/// flow's first data packet (it costs an AES block); so should the caller.
pub fn is_mtproto(p: &[u8]) -> bool {
    if p.len() < 64 {
        return false;
    }
    // keystream block 3 (bytes 48..64) decrypts bytes 56..60 with its bytes 8..12
    let mut ctr = u128::from_be_bytes(p[40..56].try_into().unwrap_or([0; 16]));
    ctr = ctr.wrapping_add(3);
    let mut block = GenericArray::from(ctr.to_be_bytes());
    Aes256::new(GenericArray::from_slice(&p[8..40])).encrypt_block(&mut block);
    (0..4).all(|i| block[8 + i] ^ p[56 + i] == 0xef)
}
