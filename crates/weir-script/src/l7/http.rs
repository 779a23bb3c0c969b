//! HTTP/1.x: a request (nfqws2's `IsHttp`: a known method, a URI, `HTTP/1.`) with its
//! `Host` header, or a reply (`HTTP/1.x NNN`).
//!
//! The host is read as nfqws2 reads it (`HttpExtractHost`): the first `\nHost:` line (name
//! in any case), blanks skipped, up to the first blank or line end, lower case; a port
//! after `:` stays part of it. `markers.host` spans exactly those bytes.

use super::Detection;
use crate::payload::{Markers, PayloadType};

/// The request methods nfqws2 knows, each with the blank that follows it.
const METHODS: [&[u8]; 9] = [
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"OPTIONS ",
    b"PUT ",
    b"DELETE ",
    b"CONNECT ",
    b"TRACE ",
    b"PATCH ",
];

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_eol(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

/// Whether `p` is an HTTP/1.x request line: method, URI, `HTTP/1.`.
pub fn is_request(p: &[u8]) -> bool {
    if p.len() < 4 || !METHODS.iter().any(|m| p.starts_with(m)) {
        return false;
    }
    let mut i = 0;
    // method
    while i < p.len() && !is_blank(p[i]) && !is_eol(p[i]) {
        i += 1;
    }
    if i >= p.len() || !is_blank(p[i]) {
        return false;
    }
    while i < p.len() && is_blank(p[i]) {
        i += 1;
    }
    // URI
    while i < p.len() && !is_blank(p[i]) && !is_eol(p[i]) {
        i += 1;
    }
    if i >= p.len() || !is_blank(p[i]) {
        return false;
    }
    while i < p.len() && is_blank(p[i]) {
        i += 1;
    }
    let rest = &p[i..];
    rest.len() >= 10 && rest.starts_with(b"HTTP/1.")
}

/// Whether `p` is an HTTP/1.x status line: `HTTP/1.0 ` or `HTTP/1.1 ` and three digits.
pub fn is_reply(p: &[u8]) -> bool {
    p.len() > 14
        && p.starts_with(b"HTTP/1.")
        && (p[7] == b'0' || p[7] == b'1')
        && p[8] == b' '
        && p[9..12].iter().all(u8::is_ascii_digit)
}

/// The span of the first `Host` header's value, as nfqws2 reads it.
pub fn host_span(p: &[u8]) -> Option<(usize, usize)> {
    const NAME: &[u8] = b"\nhost:";
    let at = p
        .windows(NAME.len())
        .position(|w| w.eq_ignore_ascii_case(NAME))?;
    let mut s = at + NAME.len();
    while s < p.len() && is_blank(p[s]) {
        s += 1;
    }
    let mut e = s;
    while e < p.len() && !is_blank(p[e]) && !is_eol(p[e]) {
        e += 1;
    }
    (e > s).then_some((s, e))
}

/// An HTTP request or reply, None if `p` is neither.
pub fn detect(p: &[u8]) -> Option<Detection> {
    if is_request(p) {
        let span = host_span(p);
        let host =
            span.map(|(s, e)| String::from_utf8_lossy(&p[s..e].to_ascii_lowercase()).into_owned());
        return Some(Detection {
            ptype: PayloadType::HttpReq,
            host,
            markers: Markers {
                method: Some(0),
                host: span,
                sniext: None,
            },
            incomplete: None,
        });
    }
    if is_reply(p) {
        return Some(Detection::plain(PayloadType::HttpReply));
    }
    None
}
