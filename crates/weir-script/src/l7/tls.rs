//! TLS ClientHello / ServerHello: recognised on the record layer as nfqws2 does
//! (`IsTLSClientHelloPartial`: handshake record, version 3.x, hello type, hello version 3.x),
//! the SNI host name read from the handshake message, which may span several records (the
//! records' fragments are joined) and may be cut short (what is in sight is read).
//!
//! The handshake-level reader [`hello_sni`] also serves QUIC (CRYPTO data is a handshake
//! message with no record layer) and DTLS (a longer handshake header and a cookie).

use super::{be16, be24, Detection};
use crate::payload::{Markers, PayloadType};

/// The TLS extension number of server_name.
const EXT_SERVER_NAME: usize = 0;

/// Where the SNI lies in a handshake message (offsets from its type byte).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sni {
    /// The host name, lower case (bytes that are not UTF-8 are replaced).
    pub host: String,
    /// The first byte of the server_name extension's data.
    pub ext: usize,
    /// The host name's first byte and the byte after its last.
    pub span: (usize, usize),
}

/// The handshake header's length: 4 for TLS, 12 for DTLS (sequence and fragment fields).
fn hs_header_len(dtls: bool) -> usize {
    if dtls {
        12
    } else {
        4
    }
}

/// The SNI of a ClientHello handshake message `hs` (from its type byte; complete or cut
/// short: the extensions in sight are read). None when there is no readable server_name.
pub fn hello_sni(hs: &[u8], dtls: bool) -> Option<Sni> {
    let client = *hs.first()? == 1;
    if !client {
        return None;
    }
    let mut at = hs_header_len(dtls) + 2 + 32;
    // session id
    at = at.checked_add(1 + *hs.get(at)? as usize)?;
    if dtls {
        // cookie
        at = at.checked_add(1 + *hs.get(at)? as usize)?;
    }
    // cipher suites
    at = at.checked_add(2 + be16(hs, at)?)?;
    // compression methods
    at = at.checked_add(1 + *hs.get(at)? as usize)?;
    let ext_len = be16(hs, at)?;
    at += 2;
    let avail = hs.len().checked_sub(at)?;
    let end = at + ext_len.min(avail);
    while at + 4 <= end {
        let etype = be16(hs, at)?;
        let elen = be16(hs, at + 2)?;
        at += 4;
        if at + elen > end {
            return None;
        }
        if etype == EXT_SERVER_NAME {
            return sni_from_ext(hs, at, elen);
        }
        at += elen;
    }
    None
}

/// The host name in a server_name extension's data at `ext` (`elen` bytes, all in `hs`):
/// list length, name type 0 (host_name), name length, name.
fn sni_from_ext(hs: &[u8], ext: usize, elen: usize) -> Option<Sni> {
    if elen < 5 || *hs.get(ext + 2)? != 0 {
        return None;
    }
    let list_len = be16(hs, ext)?;
    let name_len = be16(hs, ext + 3)?;
    if list_len < name_len + 3 || list_len > elen - 2 {
        return None;
    }
    let start = ext + 5;
    let name = hs.get(start..start + name_len)?;
    Some(Sni {
        host: String::from_utf8_lossy(&name.to_ascii_lowercase()).into_owned(),
        ext,
        span: (start, start + name_len),
    })
}

/// One record's handshake bytes: where they begin in the handshake message and on the wire.
#[derive(Clone, Copy)]
struct Piece {
    hs: usize,
    wire: usize,
    len: usize,
}

/// The wire offset of handshake offset `off`, within one piece.
fn wire_of(pieces: &[Piece], off: usize) -> Option<usize> {
    pieces
        .iter()
        .find(|p| off >= p.hs && off < p.hs + p.len)
        .map(|p| p.wire + off - p.hs)
}

/// The wire span of handshake span `span` when it lies in one piece (not cut by a record
/// header).
fn wire_span(pieces: &[Piece], span: (usize, usize)) -> Option<(usize, usize)> {
    let p = pieces
        .iter()
        .find(|p| span.0 >= p.hs && span.1 <= p.hs + p.len && span.0 <= span.1)?;
    Some((p.wire + span.0 - p.hs, p.wire + span.1 - p.hs))
}

/// Whether `p` starts like a TLS hello record (nfqws2's `IsTLSHello`, partial OK): the
/// handshake type (1 ClientHello, 2 ServerHello).
fn hello_record_type(p: &[u8]) -> Option<u8> {
    if p.len() < 11 || p[0] != 0x16 || p[1] != 3 || p[2] > 3 {
        return None;
    }
    if !(p[5] == 1 || p[5] == 2) || p[9] != 3 || p[10] > 3 {
        return None;
    }
    Some(p[5])
}

/// How far a ClientHello on the record layer reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// Not a ClientHello record.
    NotHello,
    /// Cut short: at least this many bytes are needed; `exact` when that is the whole
    /// hello's length (every record header it needs in sight).
    Needs { bytes: usize, exact: bool },
    /// Whole: it ends (with its last record) at this offset.
    Whole(usize),
}

/// The handshake message joined from the records of `p`.
struct Joined {
    hs: Vec<u8>,
    pieces: Vec<Piece>,
    /// Bytes needed (and whether exactly), None when whole or when the message stops.
    needed: Option<(usize, bool)>,
    /// The end of the last record read.
    end: usize,
}

fn join_records(p: &[u8]) -> Option<Joined> {
    let hs_total = be24(p, 6)? + 4;
    let mut j = Joined {
        hs: Vec::new(),
        pieces: Vec::new(),
        needed: None,
        end: 0,
    };
    let mut pos = 0usize;
    while j.hs.len() < hs_total {
        if pos + 5 > p.len() {
            // the next record header is not in sight
            j.needed = Some((pos + 5 + (hs_total - j.hs.len()), false));
            break;
        }
        if p[pos] != 0x16 || p[pos + 1] != 3 {
            // not a handshake record: the message stops here
            break;
        }
        let rlen = be16(p, pos + 3)?;
        let body = pos + 5;
        let rec_end = body + rlen;
        let avail = rec_end.min(p.len()) - body;
        j.pieces.push(Piece {
            hs: j.hs.len(),
            wire: body,
            len: avail,
        });
        j.hs.extend_from_slice(&p[body..body + avail]);
        if rec_end > p.len() {
            let rest = hs_total.saturating_sub(j.hs.len() + (rec_end - p.len()));
            j.needed = Some(if rest == 0 {
                (rec_end, true)
            } else {
                (rec_end + 5 + rest, false)
            });
            break;
        }
        pos = rec_end;
        j.end = pos;
    }
    Some(j)
}

/// How far the ClientHello record(s) at the start of `p` reach.
pub fn client_hello_extent(p: &[u8]) -> Extent {
    if hello_record_type(p) != Some(1) {
        return Extent::NotHello;
    }
    match join_records(p) {
        None => Extent::NotHello,
        Some(Joined {
            needed: Some((bytes, exact)),
            ..
        }) => Extent::Needs { bytes, exact },
        Some(j) => Extent::Whole(j.end),
    }
}

/// A TLS hello on the record layer: its type, host and markers, and for a ClientHello cut
/// short how many bytes are needed. None when `p` does not start with a hello record.
pub fn detect_record(p: &[u8]) -> Option<Detection> {
    let htype = hello_record_type(p)?;
    if htype != 1 {
        return Some(Detection::plain(PayloadType::TlsServerHello));
    }
    let j = join_records(p)?;
    let mut d = Detection {
        incomplete: j.needed.map(|n| n.0),
        ..Detection::plain(PayloadType::TlsClientHello)
    };
    if let Some(sni) = hello_sni(&j.hs, false) {
        d.markers = Markers {
            method: None,
            host: wire_span(&j.pieces, sni.span),
            sniext: wire_of(&j.pieces, sni.ext),
        };
        d.host = Some(sni.host);
    }
    Some(d)
}

/// A ClientHello handshake message with no record layer (QUIC CRYPTO data): its SNI.
pub fn handshake_is_client_hello(hs: &[u8]) -> bool {
    hs.len() >= 6 && hs[0] == 1 && hs[4] == 3 && hs[5] <= 3
}

/// The whole length of the handshake message starting `hs` (header included), if in sight.
pub fn handshake_len(hs: &[u8]) -> Option<usize> {
    Some(be24(hs, 1)? + 4)
}
