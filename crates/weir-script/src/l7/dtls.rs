//! DTLS ClientHello / ServerHello (nfqws2's `IsDTLS`: a record of a known content type and
//! DTLS version whose length fits, then the handshake type), and the ClientHello's SNI read
//! with the TLS reader (DTLS handshake header and cookie skipped).

use super::{be16, tls, Detection};
use crate::payload::{Markers, PayloadType};

/// The DTLS record header's length.
const RECORD: usize = 13;

/// Whether `p` starts with a whole DTLS record header of a known content type and version.
pub fn is_dtls(p: &[u8]) -> bool {
    p.len() > RECORD
        && (0x14..=0x17).contains(&p[0])
        && matches!(
            (p[1], p[2]),
            (0xfe, 0xff) | (0xfe, 0xfd) | (0xfe, 0xfc) | (0x01, 0x00)
        )
        && be16(p, 11).is_some_and(|l| l + RECORD <= p.len())
}

/// A DTLS hello, None if `p` is not one.
pub fn detect(p: &[u8]) -> Option<Detection> {
    if !is_dtls(p) || p[0] != 0x16 {
        return None;
    }
    match p[RECORD] {
        1 => {
            let len = be16(p, 11)?;
            let hs = &p[RECORD..RECORD + len];
            let mut d = Detection::plain(PayloadType::DtlsClientHello);
            if let Some(sni) = tls::hello_sni(hs, true) {
                d.markers = Markers {
                    method: None,
                    host: Some((sni.span.0 + RECORD, sni.span.1 + RECORD)),
                    sniext: Some(sni.ext + RECORD),
                };
                d.host = Some(sni.host);
            }
            Some(d)
        }
        2 => Some(Detection::plain(PayloadType::DtlsServerHello)),
        _ => None,
    }
}
