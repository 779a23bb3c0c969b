//! QUIC Initial packets: recognised by their long header as nfqws2 does (`IsQUICInitial`),
//! decrypted with the version's initial secrets (RFC 9001 section 5 for version 1 and the
//! drafts, RFC 9369 section 3.3 for version 2: HKDF-SHA256 from the Destination Connection
//! ID, header protection with AES-128-ECB, payload with AES-128-GCM), their CRYPTO frames
//! joined by offset into the TLS ClientHello, whose SNI is the host.
//!
//! A ClientHello too big for one datagram (post-quantum key shares) is spread over several
//! Initials; [`QuicReasm`] is fed them one by one and yields the host once the ClientHello
//! is whole. It is bounded: CRYPTO data beyond its limit makes it give up.

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, Nonce, Tag};
use hkdf::Hkdf;
use sha2::Sha256;

use super::tls;

/// The longest connection ID QUIC allows.
const MAX_CID: usize = 20;

/// QUIC version 2 (RFC 9369) and its last draft.
fn is_v2(version: u32) -> bool {
    version == 0x6b33_43cf || version == 0x709a_50c4
}

/// The draft a version follows (as nfqws2 and Wireshark number them), 0 if unknown.
fn draft_version(version: u32) -> u8 {
    if version >> 8 == 0x00ff_0000 {
        return version as u8;
    }
    match version {
        0xface_b001 => 22,
        0xface_b002 | 0xface_b00e => 27,
        1 => 34,
        v if is_v2(v) => 100,
        v if v & 0x0f0f_0f0f == 0x0a0a_0a0a => 29,
        _ => 0,
    }
}

/// The initial salt of a version (None: no salt known, e.g. gQUIC).
fn initial_salt(version: u32) -> Option<[u8; 20]> {
    const DRAFT22: [u8; 20] = [
        0x7f, 0xbc, 0xdb, 0x0e, 0x7c, 0x66, 0xbb, 0xe9, 0x19, 0x3a, 0x96, 0xcd, 0x21, 0x51, 0x9e,
        0xbd, 0x7a, 0x02, 0x64, 0x4a,
    ];
    const DRAFT23: [u8; 20] = [
        0xc3, 0xee, 0xf7, 0x12, 0xc7, 0x2e, 0xbb, 0x5a, 0x11, 0xa7, 0xd2, 0x43, 0x2b, 0xb4, 0x63,
        0x65, 0xbe, 0xf9, 0xf5, 0x02,
    ];
    const DRAFT29: [u8; 20] = [
        0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11,
        0xe0, 0x43, 0x90, 0xa8, 0x99,
    ];
    const V1: [u8; 20] = [
        0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c,
        0xad, 0xcc, 0xbb, 0x7f, 0x0a,
    ];
    const V2: [u8; 20] = [
        0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d,
        0xcb, 0xf9, 0xbd, 0x2e, 0xd9,
    ];
    Some(match draft_version(version) {
        0 => return None,
        1..=22 => DRAFT22,
        23..=28 => DRAFT23,
        29..=32 => DRAFT29,
        33..=34 => V1,
        _ => V2,
    })
}

/// A variable-length integer at `at`: its value and its size.
fn varint(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let first = *b.get(at)?;
    let size = 1usize << (first >> 6);
    let bytes = b.get(at..at + size)?;
    let mut v = (first & 0x3f) as u64;
    for &x in &bytes[1..] {
        v = (v << 8) | x as u64;
    }
    Some((v, size))
}

/// The long header's fields up to the packet number.
struct LongHeader<'a> {
    version: u32,
    dcid: &'a [u8],
    /// Where the (protected) packet number starts.
    pn_offset: usize,
    /// The Length field: packet number and payload, in bytes.
    length: usize,
}

fn long_header(p: &[u8]) -> Option<LongHeader<'_>> {
    if p.len() < 9 || p[0] & 0x80 == 0 {
        return None;
    }
    let version = u32::from_be_bytes([p[1], p[2], p[3], p[4]]);
    let dcid_len = p[5] as usize;
    if dcid_len > MAX_CID {
        return None;
    }
    let dcid = p.get(6..6 + dcid_len)?;
    let mut at = 6 + dcid_len;
    let scid_len = *p.get(at)? as usize;
    if scid_len > MAX_CID {
        return None;
    }
    at += 1 + scid_len;
    let (token_len, n) = varint(p, at)?;
    at = at
        .checked_add(n)?
        .checked_add(usize::try_from(token_len).ok()?)?;
    let (length, n) = varint(p, at)?;
    at += n;
    let length = usize::try_from(length).ok()?;
    if at.checked_add(length)? > p.len() {
        return None;
    }
    Some(LongHeader {
        version,
        dcid,
        pn_offset: at,
        length,
    })
}

/// Whether `p` is a QUIC Initial (nfqws2's `IsQUICInitial`): at least 128 bytes, a long
/// header of a known version (draft 11 or later) of type Initial, lengths within `p`.
pub fn is_initial(p: &[u8]) -> bool {
    if p.len() < 128 {
        return false;
    }
    let Some(h) = long_header(p) else {
        return false;
    };
    if draft_version(h.version) < 11 {
        return false;
    }
    p[0] & 0xf0 == if is_v2(h.version) { 0xd0 } else { 0xc0 }
}

/// HKDF-Expand-Label (RFC 8446 section 7.1) with an empty context.
fn expand_label(secret: &[u8], label: &str, out: &mut [u8]) -> Option<()> {
    let hk = Hkdf::<Sha256>::from_prk(secret).ok()?;
    let full = format!("tls13 {label}");
    let mut info = Vec::with_capacity(4 + full.len());
    info.extend_from_slice(&(out.len() as u16).to_be_bytes());
    info.push(full.len() as u8);
    info.extend_from_slice(full.as_bytes());
    info.push(0);
    hk.expand(&info, out).ok()
}

/// The client's Initial key, IV and header protection key for `version` and `dcid`.
fn client_keys(version: u32, dcid: &[u8]) -> Option<([u8; 16], [u8; 12], [u8; 16])> {
    let salt = initial_salt(version)?;
    let (initial, _) = Hkdf::<Sha256>::extract(Some(&salt), dcid);
    let mut client = [0u8; 32];
    expand_label(&initial, "client in", &mut client)?;
    let (lk, li, lh) = if is_v2(version) {
        ("quicv2 key", "quicv2 iv", "quicv2 hp")
    } else {
        ("quic key", "quic iv", "quic hp")
    };
    let mut key = [0u8; 16];
    let mut iv = [0u8; 12];
    let mut hp = [0u8; 16];
    expand_label(&client, lk, &mut key)?;
    expand_label(&client, li, &mut iv)?;
    expand_label(&client, lh, &mut hp)?;
    Some((key, iv, hp))
}

/// The decrypted payload (frames) of the client Initial packet that starts `p`, and its
/// Destination Connection ID. None when `p` is not one or does not decrypt.
pub fn decrypt_initial(p: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    if !is_initial(p) {
        return None;
    }
    let h = long_header(p)?;
    if h.dcid.is_empty() || h.length < 20 {
        return None;
    }
    let (key, iv, hp) = client_keys(h.version, h.dcid)?;
    // header protection: the sample is 16 bytes, 4 after the packet number's start
    let sample = p.get(h.pn_offset + 4..h.pn_offset + 20)?;
    let mut mask = GenericArray::clone_from_slice(sample);
    Aes128::new(GenericArray::from_slice(&hp)).encrypt_block(&mut mask);
    let first = p[0] ^ (mask[0] & 0x0f);
    let pn_len = (first & 3) as usize + 1;
    let mut header = p.get(..h.pn_offset + pn_len)?.to_vec();
    header[0] = first;
    let mut pn: u64 = 0;
    for i in 0..pn_len {
        let b = header[h.pn_offset + i] ^ mask[1 + i];
        header[h.pn_offset + i] = b;
        pn = (pn << 8) | b as u64;
    }
    let mut nonce = iv;
    for (i, b) in pn.to_be_bytes().iter().enumerate() {
        nonce[4 + i] ^= b;
    }
    let body = p.get(h.pn_offset + pn_len..h.pn_offset + h.length)?;
    let ct_len = body.len().checked_sub(16)?;
    let mut buf = body[..ct_len].to_vec();
    let tag = Tag::from_slice(&body[ct_len..]);
    Aes128Gcm::new(GenericArray::from_slice(&key))
        .decrypt_in_place_detached(Nonce::from_slice(&nonce), &header, &mut buf, tag)
        .ok()?;
    Some((buf, h.dcid.to_vec()))
}

/// The CRYPTO frames' data of decrypted Initial frames: (offset, bytes) each. Stops at
/// the first frame type an Initial should not carry or that runs past the end.
pub fn crypto_frames(frames: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < frames.len() {
        let ftype = frames[at];
        at += 1;
        match ftype {
            0x00 | 0x01 => {}
            0x02 | 0x03 => {
                // ACK: largest, delay, range count, first range, ranges, ECN counts
                let Some(next) = skip_ack(frames, at, ftype == 0x03) else {
                    break;
                };
                at = next;
            }
            0x06 => {
                let Some((off, n1)) = varint(frames, at) else {
                    break;
                };
                let Some((len, n2)) = varint(frames, at + n1) else {
                    break;
                };
                let start = at + n1 + n2;
                let Some(data) = usize::try_from(len)
                    .ok()
                    .and_then(|l| frames.get(start..start.checked_add(l)?))
                else {
                    break;
                };
                out.push((off, data));
                at = start + data.len();
            }
            0x1c => {
                // CONNECTION_CLOSE: error code, frame type, reason
                let Some(next) = skip_varints(frames, at, 2)
                    .and_then(|a| varint(frames, a).map(|(l, n)| (a + n, l)))
                    .and_then(|(a, l)| a.checked_add(usize::try_from(l).ok()?))
                else {
                    break;
                };
                at = next;
            }
            _ => break,
        }
    }
    out
}

fn skip_varints(b: &[u8], mut at: usize, count: u64) -> Option<usize> {
    for _ in 0..count {
        at += varint(b, at)?.1;
    }
    Some(at)
}

fn skip_ack(b: &[u8], at: usize, ecn: bool) -> Option<usize> {
    let at = skip_varints(b, at, 2)?;
    let (ranges, n) = varint(b, at)?;
    if ranges > b.len() as u64 {
        return None;
    }
    let at = skip_varints(b, at + n, 1 + 2 * ranges)?;
    if ecn {
        skip_varints(b, at, 3)
    } else {
        Some(at)
    }
}

/// CRYPTO stream bytes joined by offset, bounded.
#[derive(Clone, Debug, Default)]
struct CryptoBuf {
    data: Vec<u8>,
    /// Byte ranges present, sorted, merged.
    ranges: Vec<(usize, usize)>,
}

impl CryptoBuf {
    /// Puts `bytes` at `off`; false if that would go past `limit`.
    fn insert(&mut self, off: u64, bytes: &[u8], limit: usize) -> bool {
        let Ok(off) = usize::try_from(off) else {
            return false;
        };
        let Some(end) = off.checked_add(bytes.len()) else {
            return false;
        };
        if end > limit {
            return false;
        }
        if bytes.is_empty() {
            return true;
        }
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[off..end].copy_from_slice(bytes);
        self.ranges.push((off, end));
        self.ranges.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.ranges.len());
        for &(s, e) in &self.ranges {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.ranges = merged;
        true
    }

    /// The bytes present from offset 0 on, without a gap.
    fn prefix(&self) -> &[u8] {
        match self.ranges.first() {
            Some(&(0, e)) => &self.data[..e],
            _ => &[],
        }
    }
}

/// The SNI host of one Initial datagram's ClientHello, as far as the CRYPTO data in it
/// (from offset 0, without a gap) goes.
pub fn initial_host(p: &[u8]) -> Option<String> {
    let (frames, _) = decrypt_initial(p)?;
    let mut buf = CryptoBuf::default();
    for (off, data) in crypto_frames(&frames) {
        if !buf.insert(off, data, 1 << 16) {
            return None;
        }
    }
    let hello = buf.prefix();
    if !tls::handshake_is_client_hello(hello) {
        return None;
    }
    tls::hello_sni(hello, false).map(|s| s.host)
}

/// What [`QuicReasm::feed`] made of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicReasmStatus {
    /// Taken; the ClientHello is not whole yet.
    NeedMore,
    /// The ClientHello is whole: [`QuicReasm::hello`] and [`QuicReasm::host`].
    Complete,
    /// Not a client Initial of this connection, or it did not decrypt: left out.
    Ignored,
    /// Given up: the CRYPTO data goes past the limit, or it is not a ClientHello. The
    /// caller lets the datagrams pass.
    Refused,
}

/// Reassembly of a ClientHello over several QUIC Initial datagrams of one connection (same
/// Destination Connection ID as the first one fed), bounded by `limit` bytes of CRYPTO data.
#[derive(Clone, Debug)]
pub struct QuicReasm {
    limit: usize,
    dcid: Option<Vec<u8>>,
    crypto: CryptoBuf,
    status: QuicReasmStatus,
    hello_len: usize,
    host: Option<String>,
}

impl QuicReasm {
    /// The limit nfqws2 uses for UDP reassembly is in this range; 16 KiB holds a
    /// ClientHello with post-quantum key shares several times over.
    pub const DEFAULT_LIMIT: usize = 16 * 1024;

    /// An empty reassembly of at most `limit` bytes of CRYPTO data.
    pub fn new(limit: usize) -> QuicReasm {
        QuicReasm {
            limit,
            dcid: None,
            crypto: CryptoBuf::default(),
            status: QuicReasmStatus::NeedMore,
            hello_len: 0,
            host: None,
        }
    }

    /// Takes one datagram. Once `Complete` or `Refused`, that is the answer to every
    /// datagram after.
    pub fn feed(&mut self, datagram: &[u8]) -> QuicReasmStatus {
        if matches!(
            self.status,
            QuicReasmStatus::Complete | QuicReasmStatus::Refused
        ) {
            return self.status;
        }
        let Some((frames, dcid)) = decrypt_initial(datagram) else {
            return QuicReasmStatus::Ignored;
        };
        match &self.dcid {
            Some(d) if *d != dcid => return QuicReasmStatus::Ignored,
            Some(_) => {}
            None => self.dcid = Some(dcid),
        }
        for (off, data) in crypto_frames(&frames) {
            if !self.crypto.insert(off, data, self.limit) {
                return self.refuse();
            }
        }
        let prefix = self.crypto.prefix();
        if prefix.len() >= 6 {
            if !tls::handshake_is_client_hello(prefix) {
                return self.refuse();
            }
            let Some(total) = tls::handshake_len(prefix) else {
                return self.refuse();
            };
            if total > self.limit {
                return self.refuse();
            }
            if prefix.len() >= total {
                self.hello_len = total;
                self.host = tls::hello_sni(&prefix[..total], false).map(|s| s.host);
                self.status = QuicReasmStatus::Complete;
            }
        }
        self.status
    }

    fn refuse(&mut self) -> QuicReasmStatus {
        self.crypto = CryptoBuf::default();
        self.status = QuicReasmStatus::Refused;
        self.status
    }

    /// The status after the last datagram taken.
    pub fn status(&self) -> QuicReasmStatus {
        self.status
    }

    /// The whole ClientHello handshake message (no record layer), once complete.
    pub fn hello(&self) -> Option<&[u8]> {
        (self.status == QuicReasmStatus::Complete).then(|| &self.crypto.data[..self.hello_len])
    }

    /// The SNI host, once complete.
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.crypto.data.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc_initial_keys() {
        let dcid = hex("8394c8f03e515708");
        // RFC 9001 appendix A.1
        let (key, iv, hp) = client_keys(1, &dcid).unwrap();
        assert_eq!(key.to_vec(), hex("1f369613dd76d5467730efcbe3b1a22d"));
        assert_eq!(iv.to_vec(), hex("fa044b2f42a3fd3b46fb255c"));
        assert_eq!(hp.to_vec(), hex("9f50449e04a0e810283a1e9933adedd2"));
        // RFC 9369 appendix A.1
        let (key, iv, hp) = client_keys(0x6b33_43cf, &dcid).unwrap();
        assert_eq!(key.to_vec(), hex("8b1a0bc121284290a29e0971b5cd045d"));
        assert_eq!(iv.to_vec(), hex("91f73e2351d8fa91660e909f"));
        assert_eq!(hp.to_vec(), hex("45b95e15235d6f45a6b19cbcb0294ba9"));
        // draft-29 has its own salt, gQUIC none
        assert_eq!(draft_version(0xff00_001d), 29);
        assert!(client_keys(0xff00_001d, &dcid).unwrap().0 != client_keys(1, &dcid).unwrap().0);
        assert!(client_keys(0x5130_3530, &dcid).is_none());
    }

    #[test]
    fn varints() {
        assert_eq!(varint(&hex("25"), 0), Some((37, 1)));
        assert_eq!(varint(&hex("7bbd"), 0), Some((15293, 2)));
        assert_eq!(varint(&hex("9d7f3e7d"), 0), Some((494878333, 4)));
        assert_eq!(
            varint(&hex("c2197c5eff14e88c"), 0),
            Some((151288809941952652, 8))
        );
        assert_eq!(varint(&hex("c2197c"), 0), None);
        assert_eq!(varint(&[], 0), None);
    }
}
