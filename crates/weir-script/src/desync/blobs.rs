//! Blobs: named byte strings the actions send (fake payloads, patterns), as nfqws2's
//! `--blob` collection, and references to them in arguments (`NAME` or a `0x..` hex
//! literal, its "Passing blobs").
//!
//! [`Blobs::new`] holds the defaults nfqws2 has: `fake_default_http` (a GET for
//! www.iana.org), `fake_default_quic` (0x40 then 619 zero bytes) and `fake_default_tls` (a
//! TLS ClientHello for www.microsoft.com generated here; [`Blobs::load_dir`] replaces it with
//! a capture when the directory has one).

use std::collections::HashMap;
use std::io;
use std::path::Path;

/// A blob named in an argument: a name looked up when the action runs, or bytes given inline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobRef {
    Name(String),
    Hex(Vec<u8>),
}

/// Parse hex digits (no prefix), an even number of them.
pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    b.chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect()
}

impl BlobRef {
    /// `0xHEX` (inline bytes) or a name. Errors for bad hex or an empty value.
    pub fn parse(s: &str) -> Result<BlobRef, String> {
        if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            match parse_hex(h) {
                Some(v) if !v.is_empty() => Ok(BlobRef::Hex(v)),
                _ => Err(format!("invalid hex string '{s}'")),
            }
        } else if s.is_empty() {
            Err(String::from("empty blob name"))
        } else {
            Ok(BlobRef::Name(s.to_string()))
        }
    }
}

/// The blob collection actions read.
#[derive(Clone, Debug)]
pub struct Blobs {
    map: HashMap<String, Vec<u8>>,
}

impl Default for Blobs {
    fn default() -> Self {
        Blobs::new()
    }
}

/// nfqws2's default fake HTTP request.
pub const FAKE_HTTP: &str = "GET / HTTP/1.1\r\nHost: www.iana.org\r\n\
User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:109.0) Gecko/20100101 Firefox/109.0\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8\r\n\
Accept-Encoding: gzip, deflate, br\r\n\r\n";

fn be16(v: &mut Vec<u8>, x: usize) {
    v.extend_from_slice(&(x as u16).to_be_bytes());
}

/// A TLS 1.3-capable ClientHello record with the SNI `host` (fixed random and session id,
/// usual cipher suites and extensions), padded to 517 bytes as browsers do.
pub fn make_client_hello(host: &str) -> Vec<u8> {
    let mut ext = Vec::new();
    // server_name
    let h = host.as_bytes();
    be16(&mut ext, 0);
    be16(&mut ext, h.len() + 5);
    be16(&mut ext, h.len() + 3);
    ext.push(0);
    be16(&mut ext, h.len());
    ext.extend_from_slice(h);
    // extended_master_secret, renegotiation_info
    ext.extend_from_slice(&[0x00, 0x17, 0, 0, 0xff, 0x01, 0, 1, 0]);
    // supported_groups: x25519, secp256r1, secp384r1
    ext.extend_from_slice(&[0, 10, 0, 8, 0, 6, 0, 0x1d, 0, 0x17, 0, 0x18]);
    // ec_point_formats
    ext.extend_from_slice(&[0, 11, 0, 2, 1, 0]);
    // ALPN h2, http/1.1
    ext.extend_from_slice(&[0, 16, 0, 14, 0, 12, 2, b'h', b'2', 8]);
    ext.extend_from_slice(b"http/1.1");
    // signature_algorithms
    ext.extend_from_slice(&[0, 13, 0, 10, 0, 8, 4, 3, 8, 4, 4, 1, 5, 1]);
    // key_share x25519
    ext.extend_from_slice(&[0, 51, 0, 38, 0, 36, 0, 0x1d, 0, 32]);
    ext.extend((0..32u8).map(|i| i.wrapping_mul(7).wrapping_add(0x31)));
    // supported_versions 1.3, 1.2
    ext.extend_from_slice(&[0, 43, 0, 5, 4, 3, 4, 3, 3]);
    // psk_key_exchange_modes
    ext.extend_from_slice(&[0, 45, 0, 2, 1, 1]);

    let mut body = vec![3, 3];
    body.extend((0..32u8).map(|i| i.wrapping_mul(29).wrapping_add(0x5a)));
    body.push(32);
    body.extend((0..32u8).map(|i| i.wrapping_mul(13).wrapping_add(0x9c)));
    let suites: [u16; 9] = [
        0x1301, 0x1303, 0x1302, 0xc02b, 0xc02f, 0xcca9, 0xcca8, 0xc02c, 0xc030,
    ];
    be16(&mut body, suites.len() * 2);
    for s in suites {
        body.extend_from_slice(&s.to_be_bytes());
    }
    body.extend_from_slice(&[1, 0]);
    // padding extension up to a 517-byte record
    let fixed = 5 + 4 + body.len() + 2 + ext.len();
    if fixed + 4 <= 517 {
        let pad = 517 - fixed - 4;
        be16(&mut ext, 21);
        be16(&mut ext, pad);
        ext.resize(ext.len() + pad, 0);
    }
    be16(&mut body, ext.len());
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0];
    be16(&mut hs, body.len());
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    be16(&mut rec, hs.len());
    rec.extend_from_slice(&hs);
    rec
}

impl Blobs {
    /// The defaults: `fake_default_tls`, `fake_default_http`, `fake_default_quic`.
    pub fn new() -> Blobs {
        let mut map = HashMap::new();
        map.insert(
            "fake_default_tls".to_string(),
            make_client_hello("www.microsoft.com"),
        );
        map.insert(
            "fake_default_http".to_string(),
            FAKE_HTTP.as_bytes().to_vec(),
        );
        let mut quic = vec![0u8; 620];
        quic[0] = 0x40;
        map.insert("fake_default_quic".to_string(), quic);
        Blobs { map }
    }

    /// No blobs at all.
    pub fn empty() -> Blobs {
        Blobs {
            map: HashMap::new(),
        }
    }

    /// The defaults plus every `*.bin` file of `dir`, named by its file stem
    /// (`tls_clienthello_iana_org`). When the directory has
    /// `tls_clienthello_www_google_com.bin`, it becomes `fake_default_tls`.
    pub fn load_dir(dir: &Path) -> io::Result<Blobs> {
        let mut b = Blobs::new();
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            if p.extension().and_then(|x| x.to_str()) != Some("bin") {
                continue;
            }
            if let Some(stem) = p.file_stem().and_then(|s| s.to_str()) {
                let data = std::fs::read(&p)?;
                if stem == "tls_clienthello_www_google_com" {
                    b.map.insert("fake_default_tls".to_string(), data.clone());
                }
                b.map.insert(stem.to_string(), data);
            }
        }
        Ok(b)
    }

    /// Add or replace a blob.
    pub fn insert(&mut self, name: &str, data: Vec<u8>) {
        self.map.insert(name.to_string(), data);
    }

    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.map.get(name).map(|v| v.as_slice())
    }

    /// The bytes a reference names (None: a name not in the collection).
    pub fn resolve<'a>(&'a self, r: &'a BlobRef) -> Option<&'a [u8]> {
        match r {
            BlobRef::Name(n) => self.get(n),
            BlobRef::Hex(v) => Some(v),
        }
    }
}

/// `len` bytes of `pat` repeated, starting at `offset` into it (nfqws2's `pattern`, zero-based:
/// pattern("12345", 3, 10) is "4512345123"). An empty pattern gives zeros.
pub fn pattern(pat: &[u8], offset: usize, len: usize) -> Vec<u8> {
    if pat.is_empty() {
        return vec![0; len];
    }
    (0..len).map(|i| pat[(offset + i) % pat.len()]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs() {
        assert_eq!(pattern(b"12345", 3, 10), b"4512345123");
        assert_eq!(
            BlobRef::parse("0x0a0B").unwrap(),
            BlobRef::Hex(vec![10, 11])
        );
        assert!(BlobRef::parse("0x0").is_err());
        assert!(BlobRef::parse("0xzz").is_err());
        let b = Blobs::new();
        let tls = b.get("fake_default_tls").unwrap();
        assert_eq!(tls.len(), 517);
        assert_eq!(u16::from_be_bytes([tls[3], tls[4]]) as usize + 5, tls.len());
        assert_eq!(b.get("fake_default_quic").unwrap().len(), 620);
    }
}
