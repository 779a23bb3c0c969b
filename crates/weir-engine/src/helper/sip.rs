//! SIP (`nf_conntrack_sip` / `nf_nat_sip`), one message per UDP datagram or TCP segment,
//! IPv4 and IPv6.
//!
//! Done:
//! - media expectations from an SDP body (Content-Type `application/sdp`) of the requests
//!   INVITE, UPDATE, ACK, PRACK and of the 1xx/2xx responses (to INVITE, UPDATE, PRACK when
//!   the CSeq says so): for each `m=` line with an `RTP/...` transport and a port other than 0,
//!   RTP (port) and RTCP (port + 1) over UDP, from the peer, to the media-level `c=` address
//!   (else the session-level one). As Linux with `sip_direct_media=1`, only media on the
//!   sender's own address (before or after NAT) is expected; the port is kept as announced.
//! - NAT rewriting (Linux's `map_addr` rule: `this.src:sport` becomes `other.dst:dport`,
//!   `this.dst:dport` becomes `other.src:sport`, a missing port meaning 5060) of the
//!   request-URI, the topmost Via's sent-by (for a request when it is the sender's, for a
//!   response when it is the peer's) with its `maddr=`, `received=` and `rport=` parameters,
//!   every Contact, From and To; in the SDP body, `o=` and `c=` addresses equal to the sender's
//!   become its translated address; Content-Length (`l:`) follows the body's length. A
//!   rewritten host is written `addr:port` even where the port was left out, as Linux's
//!   `sip_sprintf_addr_port` writes it.
//! - header names case-insensitive, compact forms, CRLF or bare LF; a malformed or truncated
//!   message (no blank line, a body shorter than its Content-Length) gives nothing.
//!
//! Not done: expectations for incoming calls from REGISTER (Linux `sip_expect_register`),
//! a message spread over several TCP segments (or several in one: only the first is read),
//! T.38 (`m=image ... udptl`), SIP over TLS (`sips:`), folded (continuation) header lines
//! (skipped), Record-Route/Route (Linux does not rewrite them either), a media port the NAT
//! would have to change (the `m=` port is never rewritten). Expectations time out after 180 s
//! (the stateful layer's).

use super::{addr_text, Cx, Edit, Expect, Out};
use std::net::{Ipv4Addr, Ipv6Addr};

/// The port an address without one means.
const SIP_PORT: u16 = 5060;

/// Read one SIP message (UDP datagram or TCP segment).
pub fn help(cx: &Cx, payload: &[u8], out: &mut Out) {
    let p = payload;
    let Some(m) = parse(p) else { return };
    let v6 = cx.this.v6;
    let mut edits = Vec::new();
    if cx.natted() {
        if let Some((_, (us, ue))) = m.request {
            if let Some(hp) = uri_hostport(p, us, ue, v6) {
                remap(cx, &hp, &mut edits);
            }
        }
        if let Some(h) = m.first("via") {
            if let Some(&(s, e)) = elements(p, h.s, h.e).first() {
                via(cx, p, s, e, m.request.is_some(), &mut edits);
            }
        }
        for h in m.headers.iter().filter(|h| h.name == "contact") {
            for (s, e) in elements(p, h.s, h.e) {
                if let Some(hp) = header_uri(p, s, e, v6) {
                    remap(cx, &hp, &mut edits);
                }
            }
        }
        for name in ["from", "to"] {
            if let Some(h) = m.first(name) {
                if let Some(hp) = header_uri(p, h.s, h.e, v6) {
                    remap(cx, &hp, &mut edits);
                }
            }
        }
    }
    let is_sdp = m.first("content-type").is_some_and(|h| {
        let v = &p[h.s..h.e];
        v.len() >= 15
            && v[..15].eq_ignore_ascii_case(b"application/sdp")
            && matches!(v.get(15), None | Some(b';' | b' ' | b'\t'))
    });
    if is_sdp {
        let want = match m.request {
            Some(((ms, me), _)) => ["INVITE", "UPDATE", "ACK", "PRACK"]
                .iter()
                .any(|x| p[ms..me].eq_ignore_ascii_case(x.as_bytes())),
            None => (100..300).contains(&m.status) && cseq_ok(p, m.first("cseq")),
        };
        let mut body_edits = Vec::new();
        sdp(cx, p, m.body, want, &mut out.expects, &mut body_edits);
        let delta: isize = body_edits
            .iter()
            .map(|e| e.with.len() as isize - e.len as isize)
            .sum();
        if delta != 0 {
            if let Some((cs, ce, n)) = m.clen {
                edits.push(edit(cs, ce, (n as isize + delta).to_string()));
            }
        }
        edits.extend(body_edits);
    }
    edits.sort_by_key(|e| e.at);
    // Spans come from distinct places of the message; refuse anything else rather than hand
    // the stateful layer a broken list.
    let sound = edits.windows(2).all(|w| w[0].at + w[0].len <= w[1].at);
    if sound && edits.iter().all(|e| e.at + e.len <= p.len()) {
        out.edits.extend(edits);
    }
}

/// Header names with their compact forms; a header is known by the first.
const NAMES: [[&str; 2]; 7] = [
    ["via", "v"],
    ["contact", "m"],
    ["from", "f"],
    ["to", "t"],
    ["content-length", "l"],
    ["content-type", "c"],
    ["cseq", "cseq"],
];

fn name_of(n: &[u8]) -> &'static str {
    let is = |s: &str| n.eq_ignore_ascii_case(s.as_bytes());
    NAMES
        .iter()
        .find(|x| is(x[0]) || is(x[1]))
        .map_or("", |x| x[0])
}

/// A header line: its name and its value's span (trimmed).
#[derive(Clone, Copy, Debug)]
struct Header {
    name: &'static str,
    s: usize,
    e: usize,
}

/// A message's parts, as spans of the payload.
struct Msg {
    /// A request's method and request-URI; None for a response.
    request: Option<((usize, usize), (usize, usize))>,
    /// A response's status code (0 for a request).
    status: u16,
    headers: Vec<Header>,
    body: (usize, usize),
    /// The Content-Length value's span and value.
    clen: Option<(usize, usize, usize)>,
}

impl Msg {
    fn first(&self, name: &str) -> Option<Header> {
        self.headers.iter().find(|h| h.name == name).copied()
    }
}

fn find(p: &[u8], s: usize, e: usize, f: impl Fn(u8) -> bool) -> Option<usize> {
    p.get(s..e)?.iter().position(|&b| f(b)).map(|i| s + i)
}

fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `s..e` without its leading and trailing blanks.
fn trim(p: &[u8], mut s: usize, mut e: usize) -> (usize, usize) {
    while s < e && is_ws(p[s]) {
        s += 1;
    }
    while e > s && is_ws(p[e - 1]) {
        e -= 1;
    }
    (s, e)
}

/// The line at `pos` (before `to`): the span of its text (without CR LF) and where the next
/// begins. None at `to`, or, with `whole`, when the line has no end.
fn line(p: &[u8], pos: usize, to: usize, whole: bool) -> Option<(usize, usize, usize)> {
    if pos >= to {
        return None;
    }
    let (mut e, next) = match find(p, pos, to, |b| b == b'\n') {
        Some(nl) => (nl, nl + 1),
        None if whole => return None,
        None => (to, to),
    };
    if e > pos && p[e - 1] == b'\r' {
        e -= 1;
    }
    Some((pos, e, next))
}

/// A decimal number of 1 to 9 digits.
fn number(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 9 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, &d| n * 10 + (d - b'0') as usize))
}

fn parse_addr(v: &[u8], v6: bool) -> Option<u128> {
    let s = std::str::from_utf8(v).ok()?;
    if v6 {
        s.parse::<Ipv6Addr>().ok().map(u128::from)
    } else {
        s.parse::<Ipv4Addr>().ok().map(|a| u32::from(a) as u128)
    }
}

fn parse(p: &[u8]) -> Option<Msg> {
    let (s, e, mut pos) = line(p, 0, p.len(), true)?;
    let first = &p[s..e];
    let (request, status) = if first.len() >= 8 && first[..8].eq_ignore_ascii_case(b"SIP/2.0 ") {
        let code = number(first.get(8..11)?)? as u16;
        if !(100..700).contains(&code) || first.get(11).is_some_and(|&b| b != b' ') {
            return None;
        }
        (None, code)
    } else {
        let sp1 = find(p, s, e, |b| b == b' ')?;
        let sp2 = find(p, sp1 + 1, e, |b| b == b' ')?;
        let method_ok = sp1 > s && p[s..sp1].iter().all(|b| b.is_ascii_graphic());
        if !method_ok || sp2 == sp1 + 1 || !p[sp2 + 1..e].eq_ignore_ascii_case(b"SIP/2.0") {
            return None;
        }
        (Some(((s, sp1), (sp1 + 1, sp2))), 0)
    };
    let mut headers = Vec::new();
    let body_start = loop {
        let (s, e, next) = line(p, pos, p.len(), true)?;
        pos = next;
        if s == e {
            break next;
        }
        if is_ws(p[s]) {
            continue; // a folded line: its header's continuation, not read
        }
        let colon = find(p, s, e, |b| b == b':')?;
        let (ns, ne) = trim(p, s, colon);
        if ns == ne || !p[ns..ne].iter().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        let (vs, ve) = trim(p, colon + 1, e);
        let name = name_of(&p[ns..ne]);
        headers.push(Header { name, s: vs, e: ve });
    };
    let mut body = (body_start, p.len());
    let mut clen = None;
    if let Some(h) = headers.iter().find(|h| h.name == "content-length") {
        let n = number(&p[h.s..h.e])?;
        if n > p.len() - body_start {
            return None; // truncated
        }
        body.1 = body_start + n;
        clen = Some((h.s, h.e, n));
    }
    Some(Msg {
        request,
        status,
        headers,
        body,
        clen,
    })
}

/// A response's CSeq names a method whose answer may carry a session description (no CSeq:
/// taken as yes).
fn cseq_ok(p: &[u8], h: Option<Header>) -> bool {
    let Some(h) = h else { return true };
    let method = p[h.s..h.e]
        .split(|&b| is_ws(b))
        .filter(|t| !t.is_empty())
        .nth(1)
        .unwrap_or(b"");
    ["INVITE", "UPDATE", "PRACK"]
        .iter()
        .any(|x| method.eq_ignore_ascii_case(x.as_bytes()))
}

/// The comma-separated elements of a header value (commas in quotes or `<...>` kept).
fn elements(p: &[u8], s: usize, e: usize) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let (mut start, mut i, mut quoted, mut angle) = (s, s, false, false);
    while i < e {
        let b = p[i];
        if quoted {
            if b == b'\\' {
                i += 1;
            } else if b == b'"' {
                quoted = false;
            }
        } else {
            match b {
                b'"' => quoted = true,
                b'<' => angle = true,
                b'>' => angle = false,
                b',' if !angle => {
                    v.push(trim(p, start, i));
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    v.push(trim(p, start.min(e), e));
    v.retain(|&(s, e)| s < e);
    v
}

/// A host (IP literal) with its optional port, where it is in the payload.
#[derive(Debug)]
struct HostPort {
    s: usize,
    e: usize,
    addr: u128,
    port: Option<u16>,
    v6: bool,
}

/// The `host[:port]` at `h` (IPv6 in brackets), followed by the end or a delimiter.
fn hostport(p: &[u8], h: usize, e: usize, v6: bool) -> Option<HostPort> {
    if h >= e {
        return None;
    }
    let (addr, mut i) = if p[h] == b'[' {
        let rb = find(p, h + 1, e, |b| b == b']')?;
        if !v6 {
            return None;
        }
        (parse_addr(&p[h + 1..rb], true)?, rb + 1)
    } else {
        if v6 {
            return None;
        }
        let end = find(p, h, e, |b| b":;?>,".contains(&b) || is_ws(b)).unwrap_or(e);
        (parse_addr(&p[h..end], false)?, end)
    };
    let mut port = None;
    if i < e && p[i] == b':' {
        let de = find(p, i + 1, e, |b| !b.is_ascii_digit()).unwrap_or(e);
        let n = number(&p[i + 1..de]).filter(|&n| n <= 65535)?;
        port = Some(n as u16);
        i = de;
    }
    if i < e && !b";?>, \t".contains(&p[i]) {
        return None;
    }
    Some(HostPort {
        s: h,
        e: i,
        addr,
        port,
        v6,
    })
}

/// The host of a `sip:` URI spanning `s..e`.
fn uri_hostport(p: &[u8], s: usize, e: usize, v6: bool) -> Option<HostPort> {
    if e < s + 4 || !p[s..s + 4].eq_ignore_ascii_case(b"sip:") {
        return None;
    }
    let h = find(p, s + 4, e, |b| b == b'@').map_or(s + 4, |at| at + 1);
    hostport(p, h, e, v6)
}

/// The host of the URI of a Contact, From or To element: `"name" <sip:...>;params` or
/// `sip:...;params`.
fn header_uri(p: &[u8], s: usize, e: usize, v6: bool) -> Option<HostPort> {
    let mut i = s;
    if p.get(i) == Some(&b'"') {
        i += 1;
        loop {
            match *p.get(i)? {
                _ if i >= e => return None,
                b'\\' => i += 2,
                b'"' => break,
                _ => i += 1,
            }
        }
    }
    match find(p, i, e, |b| b == b'<') {
        Some(lt) => {
            let gt = find(p, lt + 1, e, |b| b == b'>')?;
            uri_hostport(p, lt + 1, gt, v6)
        }
        None => {
            let (ts, te) = trim(p, i, e);
            uri_hostport(p, ts, te, v6)
        }
    }
}

/// Replace `at..end` with `with`.
fn edit(at: usize, end: usize, with: String) -> Edit {
    Edit {
        at,
        len: end - at,
        with: with.into_bytes(),
    }
}

fn host_text(addr: u128, v6: bool, brackets: bool) -> String {
    if brackets {
        format!("[{}]", addr_text(addr, v6))
    } else {
        addr_text(addr, v6)
    }
}

/// Linux's `map_addr`: the sender's address (and port) becomes its translated one, the peer's
/// as the sender sees it becomes the peer's real one.
fn map(cx: &Cx, addr: u128, port: u16) -> Option<(u128, u16)> {
    let new = if (addr, port) == (cx.this.src, cx.this.sport) {
        (cx.other.dst, cx.other.dport)
    } else if (addr, port) == (cx.this.dst, cx.this.dport) {
        (cx.other.src, cx.other.sport)
    } else {
        return None;
    };
    (new != (addr, port)).then_some(new)
}

fn remap(cx: &Cx, hp: &HostPort, edits: &mut Vec<Edit>) {
    let Some((addr, port)) = map(cx, hp.addr, hp.port.unwrap_or(SIP_PORT)) else {
        return;
    };
    // as Linux's sip_sprintf_addr_port: always `addr:port`, even where the port was left out
    let mut t = host_text(addr, hp.v6, hp.v6);
    t.push_str(&format!(":{port}"));
    edits.push(edit(hp.s, hp.e, t));
}

/// The topmost Via (`SIP/2.0/UDP host:port;params`): its sent-by when it is the sender's
/// (a request) or the peer's (a response), then its `maddr=`, `received=`, `rport=`.
fn via(cx: &Cx, p: &[u8], s: usize, e: usize, request: bool, edits: &mut Vec<Edit>) {
    let v6 = cx.this.v6;
    let Some(sp) = find(p, s, e, is_ws) else {
        return;
    };
    if sp < s + 4 || !p[s..s + 4].eq_ignore_ascii_case(b"SIP/") {
        return;
    }
    let (h, _) = trim(p, sp, e);
    let Some(hp) = hostport(p, h, e, v6) else {
        return;
    };
    let ours = if request {
        (cx.this.src, cx.this.sport)
    } else {
        (cx.this.dst, cx.this.dport)
    };
    if (hp.addr, hp.port.unwrap_or(SIP_PORT)) != ours {
        return;
    }
    remap(cx, &hp, edits);
    let mut i = hp.e;
    while let Some(semi) = find(p, i, e, |b| b == b';') {
        let pe = find(p, semi + 1, e, |b| b == b';').unwrap_or(e);
        i = pe;
        let Some(eq) = find(p, semi + 1, pe, |b| b == b'=') else {
            continue;
        };
        let (ns, ne) = trim(p, semi + 1, eq);
        let (vs, ve) = trim(p, eq + 1, pe);
        let name = &p[ns..ne];
        let bracketed = ve >= vs + 2 && p[vs] == b'[' && p[ve - 1] == b']';
        let (as_, ae) = if bracketed {
            (vs + 1, ve - 1)
        } else {
            (vs, ve)
        };
        let new = if name.eq_ignore_ascii_case(b"rport") {
            match number(&p[vs..ve]).filter(|&n| n <= 65535) {
                Some(n) if n as u16 == cx.this.dport && n as u16 != cx.other.sport => {
                    Some(cx.other.sport.to_string())
                }
                _ => None,
            }
        } else {
            let (from, to) = if name.eq_ignore_ascii_case(b"maddr") {
                (cx.this.src, cx.other.dst)
            } else if name.eq_ignore_ascii_case(b"received") {
                (cx.this.dst, cx.other.src)
            } else {
                continue;
            };
            match parse_addr(&p[as_..ae], v6) {
                Some(a) if a == from && a != to => Some(host_text(to, v6, bracketed)),
                _ => None,
            }
        };
        if let Some(t) = new {
            edits.push(edit(vs, ve, t));
        }
    }
}

/// The address of an SDP line `... IN IP4|IP6 ADDR[/ttl]` whose address is field `idx` (the
/// network and address types the two before): its span and value.
fn sdp_addr(p: &[u8], s: usize, e: usize, idx: usize, v6: bool) -> Option<(usize, usize, u128)> {
    let (mut fields, mut i) = (Vec::new(), s);
    for t in p[s..e].split(|&b| b == b' ') {
        if !t.is_empty() && fields.len() <= idx {
            fields.push((i, i + t.len()));
        }
        i += t.len() + 1;
    }
    let &(as_, fe) = fields.get(idx)?;
    let (ns, ne) = fields[idx - 2];
    let (ts, te) = fields[idx - 1];
    let kind: &[u8] = if v6 { b"IP6" } else { b"IP4" };
    if !p[ns..ne].eq_ignore_ascii_case(b"IN") || !p[ts..te].eq_ignore_ascii_case(kind) {
        return None;
    }
    let ae = find(p, as_, fe, |b| b == b'/').unwrap_or(fe);
    Some((as_, ae, parse_addr(&p[as_..ae], v6)?))
}

/// A media description: its port, whether its transport is RTP, its own `c=` address (Some(None):
/// one not understood).
type Media = (u16, bool, Option<Option<u128>>);

/// The session description in `body`: `o=`/`c=` rewrites (when translated) and, with `want`,
/// the media expectations.
fn sdp(
    cx: &Cx,
    p: &[u8],
    body: (usize, usize),
    want: bool,
    expects: &mut Vec<Expect>,
    edits: &mut Vec<Edit>,
) {
    let v6 = cx.this.v6;
    let nat = cx.natted();
    let mut session_c = None;
    let mut media: Vec<Media> = Vec::new();
    let mut pos = body.0;
    while let Some((ls, le, next)) = line(p, pos, body.1, false) {
        pos = next;
        if le < ls + 2 || p[ls + 1] != b'=' {
            continue;
        }
        let idx = match p[ls] {
            b'o' => 5,
            b'c' => 2,
            b'm' => {
                let mut f = p[ls + 2..le]
                    .split(|&b| b == b' ')
                    .filter(|t| !t.is_empty());
                let _kind = f.next();
                let port = f.next().and_then(|t| {
                    let n = number(t.split(|&b| b == b'/').next()?)?;
                    u16::try_from(n).ok()
                });
                let rtp = f
                    .next()
                    .is_some_and(|t| t.len() > 4 && t[..4].eq_ignore_ascii_case(b"RTP/"));
                media.push((port.unwrap_or(0), rtp, None));
                continue;
            }
            _ => continue,
        };
        let found = sdp_addr(p, ls + 2, le, idx, v6);
        if let Some((as_, ae, a)) = found {
            if nat && a == cx.this.src && a != cx.other.dst {
                edits.push(edit(as_, ae, addr_text(cx.other.dst, v6)));
            }
        }
        if idx == 2 {
            let c = Some(found.map(|f| f.2));
            match media.last_mut() {
                Some(m) => m.2 = c,
                None => session_c = c,
            }
        }
    }
    if !want {
        return;
    }
    for (port, rtp, c) in media {
        let Some(Some(addr)) = c.or(session_c) else {
            continue;
        };
        if port == 0 || !rtp {
            continue;
        }
        let dst = if addr == cx.this.src {
            cx.other.dst
        } else if addr == cx.other.dst {
            addr
        } else {
            continue; // not the sender's media (Linux sip_direct_media)
        };
        for port in [Some(port), port.checked_add(1)].into_iter().flatten() {
            let x = Expect {
                proto: 17,
                dst: (dst, port),
                to: (addr, port),
                sport: None,
            };
            if !expects.contains(&x) {
                expects.push(x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use weir_conntrack::{Dir, Tuple};

    fn t(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Tuple {
        Tuple {
            zone: 0,
            src: u32::from_be_bytes(src) as u128,
            dst: u32::from_be_bytes(dst) as u128,
            sport,
            dport,
            proto: 17,
            v6: false,
        }
    }

    fn a4(a: [u8; 4]) -> u128 {
        u32::from_be_bytes(a) as u128
    }

    const CLIENT: [u8; 4] = [10, 0, 0, 2];
    const PUBLIC: [u8; 4] = [198, 51, 100, 1];
    const VIP: [u8; 4] = [192, 0, 2, 10];
    const SERVER: [u8; 4] = [203, 0, 113, 5];

    /// The client 10.0.0.2:5060 masqueraded to 198.51.100.1:1024, calling 192.0.2.10 which
    /// is translated to the server 203.0.113.5.
    fn client_cx() -> Cx {
        Cx {
            dir: Dir::Original,
            this: t(CLIENT, 5060, VIP, 5060),
            other: t(SERVER, 5060, PUBLIC, 1024),
        }
    }

    fn run(cx: &Cx, p: &[u8]) -> Out {
        let mut out = Out::default();
        help(cx, p, &mut out);
        check(p, &out.edits);
        out
    }

    /// Edits sorted, in range, not overlapping.
    fn check(p: &[u8], edits: &[Edit]) {
        let mut end = 0;
        for e in edits {
            assert!(e.at >= end && e.at + e.len <= p.len(), "{edits:?}");
            end = e.at + e.len;
        }
    }

    fn apply(p: &[u8], edits: &[Edit]) -> Vec<u8> {
        let mut v = Vec::new();
        let mut at = 0;
        for e in edits {
            v.extend_from_slice(&p[at..e.at]);
            v.extend_from_slice(&e.with);
            at = e.at + e.len;
        }
        v.extend_from_slice(&p[at..]);
        v
    }

    /// A message with its Content-Length filled in.
    fn msg(head: &str, body: &str) -> Vec<u8> {
        let body = body.replace('\n', "\r\n");
        let head = head.replace('\n', "\r\n");
        format!("{}{body}", head.replace("{len}", &body.len().to_string())).into_bytes()
    }

    /// The first value of header `name` of a (CRLF) message.
    fn header<'a>(m: &'a str, name: &str) -> &'a str {
        let head = m.split("\r\n\r\n").next().unwrap();
        head.split("\r\n")
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
            })
            .unwrap()
    }

    fn body(m: &str) -> &str {
        m.split_once("\r\n\r\n").unwrap().1
    }

    fn rtp(dst: u128, to: u128, port: u16) -> Vec<Expect> {
        [port, port + 1]
            .map(|port| Expect {
                proto: 17,
                dst: (dst, port),
                to: (to, port),
                sport: None,
            })
            .to_vec()
    }

    const SDP: &str = "v=0\no=alice 2890844526 2890844526 IN IP4 10.0.0.2\ns=-\n\
                       c=IN IP4 10.0.0.2\nt=0 0\nm=audio 49170 RTP/AVP 0 8\n\
                       a=rtpmap:0 PCMU/8000\n";

    fn invite() -> Vec<u8> {
        msg(
            "INVITE sip:bob@192.0.2.10 SIP/2.0\n\
             Via: SIP/2.0/UDP 10.0.0.2:5060;branch=z9hG4bK776asdhds;rport\n\
             Max-Forwards: 70\n\
             To: Bob <sip:bob@192.0.2.10>\n\
             From: \"Alice, A.\" <sip:alice@10.0.0.2>;tag=1928301774\n\
             Call-ID: a84b4c76e66710@10.0.0.2\n\
             CSeq: 314159 INVITE\n\
             Contact: <sip:alice@10.0.0.2:5060;transport=udp>\n\
             Content-Type: application/sdp\n\
             Content-Length: {len}\n\n",
            SDP,
        )
    }

    #[test]
    fn invite_from_masqueraded_client_is_rewritten_and_expects_media() {
        let p = invite();
        let out = run(&client_cx(), &p);
        let m = String::from_utf8(apply(&p, &out.edits)).unwrap();
        assert!(
            m.starts_with("INVITE sip:bob@203.0.113.5:5060 SIP/2.0\r\n"),
            "{m}"
        );
        assert_eq!(
            header(&m, "via"),
            "SIP/2.0/UDP 198.51.100.1:1024;branch=z9hG4bK776asdhds;rport"
        );
        assert_eq!(header(&m, "to"), "Bob <sip:bob@203.0.113.5:5060>");
        assert_eq!(
            header(&m, "from"),
            "\"Alice, A.\" <sip:alice@198.51.100.1:1024>;tag=1928301774"
        );
        assert_eq!(
            header(&m, "contact"),
            "<sip:alice@198.51.100.1:1024;transport=udp>"
        );
        assert_eq!(header(&m, "call-id"), "a84b4c76e66710@10.0.0.2");
        let b = body(&m);
        assert!(b.contains("o=alice 2890844526 2890844526 IN IP4 198.51.100.1\r\n"));
        assert!(b.contains("c=IN IP4 198.51.100.1\r\nt=0 0\r\nm=audio 49170 RTP/AVP 0 8\r\n"));
        assert_eq!(header(&m, "content-length"), b.len().to_string());
        assert_eq!(out.expects, rtp(a4(PUBLIC), a4(CLIENT), 49170));
        // the rewritten message, read again as if untranslated: it parses, nothing more to do
        let cx = client_cx();
        let plain = Cx {
            other: cx.this.invert(),
            ..cx
        };
        let again = run(&plain, m.as_bytes());
        assert!(again.edits.is_empty());
        assert!(again.expects.is_empty()); // 198.51.100.1 is not the sender's address there
    }

    #[test]
    fn ok_from_server_maps_the_clients_public_address_back() {
        // the server is not translated; the client is masqueraded to 198.51.100.1:1024
        let cx = Cx {
            dir: Dir::Reply,
            this: t(SERVER, 5060, PUBLIC, 1024),
            other: t(CLIENT, 5060, SERVER, 5060),
        };
        let sdp = "v=0\no=bob 1 1 IN IP4 203.0.113.5\ns=-\nc=IN IP4 203.0.113.5\nt=0 0\n\
                   m=audio 30000 RTP/AVP 0\nm=video 0 RTP/AVP 31\n";
        let p = msg(
            "SIP/2.0 200 OK\n\
             Via: SIP/2.0/UDP 198.51.100.1:1024;branch=z9hG4bK776;received=198.51.100.1;rport=1024\n\
             Via: SIP/2.0/UDP 198.51.100.1:1024;branch=z9hG4bK000\n\
             To: Bob <sip:bob@203.0.113.5>;tag=a6c85cf\n\
             From: <sip:alice@198.51.100.1:1024>;tag=1928301774\n\
             CSeq: 314159 INVITE\n\
             Contact: <sip:bob@203.0.113.5>\n\
             Content-Type: application/sdp\n\
             Content-Length: {len}\n\n",
            sdp,
        );
        let out = run(&cx, &p);
        let m = String::from_utf8(apply(&p, &out.edits)).unwrap();
        assert_eq!(
            header(&m, "via"),
            "SIP/2.0/UDP 10.0.0.2:5060;branch=z9hG4bK776;received=10.0.0.2;rport=5060"
        );
        assert!(m.contains("Via: SIP/2.0/UDP 198.51.100.1:1024;branch=z9hG4bK000\r\n"));
        assert_eq!(
            header(&m, "from"),
            "<sip:alice@10.0.0.2:5060>;tag=1928301774"
        );
        assert_eq!(header(&m, "to"), "Bob <sip:bob@203.0.113.5>;tag=a6c85cf");
        assert_eq!(body(&m), body(std::str::from_utf8(&p).unwrap()));
        assert_eq!(out.expects, rtp(a4(SERVER), a4(SERVER), 30000));
        // a 200 to OPTIONS carrying SDP, a 486: no media
        for (status, cseq) in [("200 OK", "1 OPTIONS"), ("486 Busy", "1 INVITE")] {
            let p = msg(
                &format!("SIP/2.0 {status}\nCSeq: {cseq}\nc: application/sdp\nl: {{len}}\n\n"),
                sdp,
            );
            assert!(run(&cx, &p).expects.is_empty());
        }
    }

    #[test]
    fn without_nat_nothing_is_rewritten_but_media_is_expected() {
        let this = t(CLIENT, 5060, SERVER, 5060);
        let cx = Cx {
            dir: Dir::Original,
            this,
            other: this.invert(),
        };
        let p = invite();
        let out = run(&cx, &p);
        assert!(out.edits.is_empty());
        assert_eq!(out.expects, rtp(a4(CLIENT), a4(CLIENT), 49170));
    }

    #[test]
    fn media_not_on_the_senders_address_is_not_expected() {
        let sdp = "v=0\no=a 1 1 IN IP4 10.0.0.2\ns=-\nc=IN IP4 10.0.0.2\nt=0 0\n\
                   m=audio 4000 RTP/AVP 0\nc=IN IP4 10.9.9.9\n\
                   m=audio 5000 RTP/AVP 0\nc=IN IP4 198.51.100.1\n\
                   m=image 6000 udptl t38\n\
                   m=audio 7000 RTP/SAVP 0\n\
                   m=audio 8000 RTP/AVP 0\nc=IN IP6 ::1\n";
        let p = msg(
            "UPDATE sip:bob@192.0.2.10 SIP/2.0\nContent-Type: application/sdp\nContent-Length: {len}\n\n",
            sdp,
        );
        let out = run(&client_cx(), &p);
        let mut want = rtp(a4(PUBLIC), a4(PUBLIC), 5000); // already public: dst == to
        want.extend(rtp(a4(PUBLIC), a4(CLIENT), 7000));
        assert_eq!(out.expects, want);
    }

    #[test]
    fn ipv6_invite() {
        let a = |s: &str| u128::from(s.parse::<Ipv6Addr>().unwrap());
        let t6 = |src: &str, dst: &str| Tuple {
            zone: 0,
            src: a(src),
            dst: a(dst),
            sport: 5060,
            dport: 5060,
            proto: 17,
            v6: true,
        };
        let cx = Cx {
            dir: Dir::Original,
            this: t6("2001:db8:1::2", "2001:db8:2::5"),
            other: t6("2001:db8:2::5", "2001:db8:ffff::1"),
        };
        let sdp = "v=0\no=- 1 1 IN IP6 2001:db8:1::2\ns=-\nc=IN IP6 2001:db8:1::2\nt=0 0\n\
                   m=audio 20000 RTP/AVP 0\n";
        let p = msg(
            "INVITE sip:bob@[2001:db8:2::5] SIP/2.0\n\
             Via: SIP/2.0/UDP [2001:db8:1::2]:5060;branch=z9hG4bKx;maddr=[2001:db8:1::2]\n\
             From: <sip:alice@[2001:db8:1::2]>;tag=x\n\
             To: <sip:bob@[2001:db8:2::5]>\n\
             Contact: <sip:alice@[2001:db8:1::2]>, sip:alice@[2001:db8:1::3]\n\
             CSeq: 1 INVITE\n\
             Content-Type: application/sdp\n\
             Content-Length: {len}\n\n",
            sdp,
        );
        let out = run(&cx, &p);
        let m = String::from_utf8(apply(&p, &out.edits)).unwrap();
        assert!(m.starts_with("INVITE sip:bob@[2001:db8:2::5] SIP/2.0\r\n"));
        assert_eq!(
            header(&m, "via"),
            "SIP/2.0/UDP [2001:db8:ffff::1]:5060;branch=z9hG4bKx;maddr=[2001:db8:ffff::1]"
        );
        assert_eq!(
            header(&m, "from"),
            "<sip:alice@[2001:db8:ffff::1]:5060>;tag=x"
        );
        assert_eq!(
            header(&m, "contact"),
            "<sip:alice@[2001:db8:ffff::1]:5060>, sip:alice@[2001:db8:1::3]"
        );
        let b = body(&m);
        assert!(b.contains("o=- 1 1 IN IP6 2001:db8:ffff::1\r\n"));
        assert!(b.contains("c=IN IP6 2001:db8:ffff::1\r\n"));
        assert_eq!(header(&m, "content-length"), b.len().to_string());
        assert_eq!(
            out.expects,
            rtp(a("2001:db8:ffff::1"), a("2001:db8:1::2"), 20000)
        );
    }

    #[test]
    fn compact_form_and_bare_lf() {
        let body = "v=0\no=a 1 1 IN IP4 10.0.0.2\ns=-\nc=IN IP4 10.0.0.2\nt=0 0\nm=audio 40000 RTP/AVP 0\n";
        let head = format!(
            "invite sip:bob@192.0.2.10:5060 SIP/2.0\n\
             v:SIP/2.0/UDP 10.0.0.2\n\
             f: sip:alice@10.0.0.2;tag=9\n\
             t: <sip:bob@192.0.2.10>\n\
             m: <sip:alice@10.0.0.2>\n\
             c: Application/SDP\n\
             L : {}\n\n",
            body.len()
        );
        let p = format!("{head}{body}").into_bytes();
        let out = run(&client_cx(), &p);
        let m = String::from_utf8(apply(&p, &out.edits)).unwrap();
        let (h, b) = m.split_once("\n\n").unwrap();
        assert_eq!(
            h,
            "invite sip:bob@203.0.113.5:5060 SIP/2.0\n\
             v:SIP/2.0/UDP 198.51.100.1:1024\n\
             f: sip:alice@198.51.100.1:1024;tag=9\n\
             t: <sip:bob@203.0.113.5:5060>\n\
             m: <sip:alice@198.51.100.1:1024>\n\
             c: Application/SDP\n\
             L : 88"
        );
        assert_eq!(b.len(), 88);
        assert!(b.contains("c=IN IP4 198.51.100.1\nt=0 0\nm=audio 40000 RTP/AVP 0\n"));
        assert_eq!(out.expects, rtp(a4(PUBLIC), a4(CLIENT), 40000));
    }

    #[test]
    fn garbage_truncated_and_overlong_content_length_give_nothing() {
        let cx = client_cx();
        let p = invite();
        // every cut loses the blank line or part of the body
        for n in 0..p.len() {
            assert_eq!(run(&cx, &p[..n]), Out::default(), "cut at {n}");
        }
        let long = String::from_utf8(p.clone()).unwrap().replace(
            &format!("Content-Length: {}", SDP.replace('\n', "\r\n").len()),
            "Content-Length: 9999",
        );
        assert!(long.contains("9999"));
        assert_eq!(run(&cx, long.as_bytes()), Out::default());
        for g in [
            &b""[..],
            b"\r\n\r\n",
            b"SIP/2.0 2000 OK\r\n\r\n",
            b"INVITE SIP/2.0\r\n\r\n",
            b"INVITE sip:[::1 SIP/2.0\r\nVia: SIP/2.0/UDP [\r\nContact: \"\r\n\r\n",
            b"SIP/2.0 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
            b"INVITE sip:a@10.0.0.2:99999 SIP/2.0\r\nm: <sip:10.0.0.2:\r\nc: application/sdp\r\n\r\nm=\r\nc=IN IP4\r\no=\r\nm=audio 65535 RTP/AVP\r\nc=IN IP4 10.0.0.2/",
            b"\xff\xfe\x00INVITE",
        ] {
            let _ = run(&cx, g);
        }
    }

    proptest! {
        #[test]
        fn random_bytes_do_not_panic(p in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = run(&client_cx(), &p);
        }

        #[test]
        fn mutated_invites_keep_edits_sound(
            cuts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            keep in any::<prop::sample::Index>(),
        ) {
            let mut p = invite();
            for (i, b) in cuts {
                let i = i.index(p.len());
                p[i] = b;
            }
            let n = keep.index(p.len() + 1);
            let _ = run(&client_cx(), &p[..n.max(p.len() / 2)]);
        }
    }
}
