//! FTP (`nf_conntrack_ftp` / `nf_nat_ftp`): the data connection a control segment announces.
//!
//! As Linux, a segment is read only when it starts with one of these (commands case-blind):
//!
//! | direction | text | announces |
//! |---|---|---|
//! | client → server | `PORT a,b,c,d,p1,p2` (RFC 959) | the client's address and port (active mode) |
//! | client → server | `EPRT |1|a.b.c.d|port|`, `EPRT |2|v6|port|` (RFC 2428) | the same, IPv4 or IPv6 |
//! | server → client | `227 ... (a,b,c,d,p1,p2)` | the server's address and port (passive mode) |
//! | server → client | `229 ... (|||port|)` | the server's port, on its own address |
//!
//! The address announced must be the sender's own (before NAT); others are ignored (Linux's
//! default, `loose=0`). The peer then connects from any port to the announced endpoint, or,
//! when the control connection is translated, to the sender's translated address with the same
//! port, which the segment is rewritten to say (`nf_nat_ftp`: the numbers replaced, the
//! segment's length possibly changed). Not done: a command split over two segments (Linux
//! skips those too), Linux's search for a free port when the announced one is taken.

use super::{addr_text, Cx, Edit, Expect, Out};

/// Read one segment of the control connection.
pub fn help(cx: &Cx, payload: &[u8], out: &mut Out) {
    let v6 = cx.this.v6;
    let found = if cx.dir == weir_conntrack::Dir::Original {
        if starts_with_ci(payload, b"PORT ") && !v6 {
            rfc959(payload, 5, b'\r').map(|(a, p, s, e)| (Some(a), p, s, e, Style::Port))
        } else if starts_with_ci(payload, b"EPRT ") {
            eprt(payload, 5, v6).map(|(a, p, s, e)| (Some(a), p, s, e, Style::Eprt))
        } else {
            None
        }
    } else if payload.starts_with(b"227 ") && !v6 {
        let open = payload.iter().position(|&b| b == b'(').filter(|&i| {
            // within the first line
            !payload[..i].contains(&b'\n')
        });
        open.and_then(|i| rfc959(payload, i + 1, b')'))
            .map(|(a, p, s, e)| (Some(a), p, s, e, Style::Port))
    } else if payload.starts_with(b"229 ") {
        let open = payload
            .iter()
            .position(|&b| b == b'(')
            .filter(|&i| !payload[..i].contains(&b'\n'));
        open.and_then(|i| epsv(payload, i + 1))
            .map(|(p, s, e)| (None, p, s, e, Style::Epsv))
    } else {
        None
    };
    let Some((addr, port, start, end, style)) = found else {
        return;
    };
    if port == 0 {
        return;
    }
    // the sender's own address (EPSV names none: the control connection's)
    let addr = addr.unwrap_or(cx.this.src);
    if addr != cx.this.src {
        return;
    }
    let dst = if cx.natted() {
        (cx.other.dst, port)
    } else {
        (addr, port)
    };
    out.expects.push(Expect {
        proto: 6,
        dst,
        to: (addr, port),
        sport: None,
    });
    if dst != (addr, port) {
        let with = match style {
            Style::Port => {
                let a = (dst.0 as u32).to_be_bytes();
                format!(
                    "{},{},{},{},{},{}",
                    a[0],
                    a[1],
                    a[2],
                    a[3],
                    dst.1 >> 8,
                    dst.1 & 0xff
                )
            }
            Style::Eprt => {
                let d = payload[start] as char;
                let af = if v6 { 2 } else { 1 };
                format!("{d}{af}{d}{}{d}{}{d}", addr_text(dst.0, v6), dst.1)
            }
            Style::Epsv => {
                let d = payload[start] as char;
                format!("{d}{d}{d}{}{d}", dst.1)
            }
        };
        if with.as_bytes() != &payload[start..end] {
            out.edits.push(Edit {
                at: start,
                len: end - start,
                with: with.into_bytes(),
            });
        }
    }
}

#[derive(Clone, Copy)]
enum Style {
    Port,
    Eprt,
    Epsv,
}

fn starts_with_ci(p: &[u8], pat: &[u8]) -> bool {
    p.len() >= pat.len() && p[..pat.len()].eq_ignore_ascii_case(pat)
}

/// `a,b,c,d,p1,p2` from `at`, ended by `term` (or end of line): the address, the port and the
/// span of the numbers.
fn rfc959(p: &[u8], at: usize, term: u8) -> Option<(u128, u16, usize, usize)> {
    let mut nums = [0u32; 6];
    let mut i = at;
    for (k, n) in nums.iter_mut().enumerate() {
        let s = i;
        while i < p.len() && p[i].is_ascii_digit() && i - s < 3 {
            *n = *n * 10 + (p[i] - b'0') as u32;
            i += 1;
        }
        if i == s || *n > 255 {
            return None;
        }
        if k < 5 {
            if p.get(i) != Some(&b',') {
                return None;
            }
            i += 1;
        }
    }
    // Linux wants the terminator (PORT: end of line; 227: the closing parenthesis)
    match p.get(i) {
        Some(&c) if c == term || (term == b'\r' && c == b'\n') => {}
        _ => return None,
    }
    let a = (nums[0] << 24) | (nums[1] << 16) | (nums[2] << 8) | nums[3];
    let port = ((nums[4] << 8) | nums[5]) as u16;
    Some((a as u128, port, at, i))
}

/// `|1|a.b.c.d|port|` (or `|2|v6|port|`) from `at`, any delimiter in `!`..`~`.
fn eprt(p: &[u8], at: usize, v6: bool) -> Option<(u128, u16, usize, usize)> {
    let d = *p.get(at)?;
    if !(33..=126).contains(&d) || d.is_ascii_alphanumeric() {
        return None;
    }
    let rest = p.get(at + 1..)?;
    let line_end = rest
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(rest.len());
    let line = &rest[..line_end];
    let mut parts = line.split(|&b| b == d);
    let af = parts.next()?;
    let addr_raw = parts.next()?;
    let port_raw = parts.next()?;
    // the closing delimiter
    parts.next()?;
    let addr = std::str::from_utf8(addr_raw).ok()?;
    let a = match (af, v6) {
        (b"1", false) => addr
            .parse::<std::net::Ipv4Addr>()
            .ok()
            .map(|a| u32::from(a) as u128),
        (b"2", true) => addr.parse::<std::net::Ipv6Addr>().ok().map(u128::from),
        _ => None,
    }?;
    let port: u16 = std::str::from_utf8(port_raw).ok()?.parse().ok()?;
    let end = at + 1 + af.len() + 1 + addr_raw.len() + 1 + port_raw.len() + 1;
    Some((a, port, at, end))
}

/// `|||port|` from `at`: the port and the span.
fn epsv(p: &[u8], at: usize) -> Option<(u16, usize, usize)> {
    let d = *p.get(at)?;
    if !(33..=126).contains(&d) || d.is_ascii_alphanumeric() {
        return None;
    }
    if p.get(at + 1) != Some(&d) || p.get(at + 2) != Some(&d) {
        return None;
    }
    let s = at + 3;
    let mut i = s;
    let mut port: u32 = 0;
    while i < p.len() && p[i].is_ascii_digit() && i - s < 5 {
        port = port * 10 + (p[i] - b'0') as u32;
        i += 1;
    }
    if i == s || port > 65535 || p.get(i) != Some(&d) {
        return None;
    }
    Some((port as u16, at, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_conntrack::{Dir, Tuple};

    fn t(src: u128, sport: u16, dst: u128, dport: u16, v6: bool) -> Tuple {
        Tuple {
            zone: 0,
            src,
            dst,
            sport,
            dport,
            proto: 6,
            v6,
        }
    }
    const CLIENT: u128 = 0x0a00_0002; // 10.0.0.2
    const PUBLIC: u128 = 0xc612_3d01; // 198.18.61.1 (the router, masquerading)
    const SERVER: u128 = 0xc612_3d02; // 198.18.61.2

    /// The client masqueraded: original client:40000 -> server:21, reply server:21 ->
    /// public:40000.
    fn snat(dir: Dir) -> Cx {
        let orig = t(CLIENT, 40000, SERVER, 21, false);
        let reply = t(SERVER, 21, PUBLIC, 40000, false);
        match dir {
            Dir::Original => Cx {
                dir,
                this: orig,
                other: reply,
            },
            Dir::Reply => Cx {
                dir,
                this: reply,
                other: orig,
            },
        }
    }

    fn apply(p: &[u8], out: &Out) -> Vec<u8> {
        let mut v = Vec::new();
        let mut at = 0;
        for e in &out.edits {
            v.extend_from_slice(&p[at..e.at]);
            v.extend_from_slice(&e.with);
            at = e.at + e.len;
        }
        v.extend_from_slice(&p[at..]);
        v
    }

    #[test]
    fn port_under_masquerade_is_rewritten_and_expected_on_the_public_address() {
        let p = b"PORT 10,0,0,2,156,64\r\n";
        let mut out = Out::default();
        help(&snat(Dir::Original), p, &mut out);
        assert_eq!(
            out.expects,
            vec![Expect {
                proto: 6,
                dst: (PUBLIC, 40000),
                to: (CLIENT, 40000),
                sport: None
            }]
        );
        assert_eq!(apply(p, &out), b"PORT 198,18,61,1,156,64\r\n");
        // lower case, bare LF
        let mut out = Out::default();
        help(&snat(Dir::Original), b"port 10,0,0,2,0,21\n", &mut out);
        assert_eq!(out.expects[0].dst, (PUBLIC, 21));
    }

    #[test]
    fn eprt_and_epsv_and_pasv() {
        let p = b"EPRT |1|10.0.0.2|40000|\r\n";
        let mut out = Out::default();
        help(&snat(Dir::Original), p, &mut out);
        assert_eq!(apply(p, &out), b"EPRT |1|198.18.61.1|40000|\r\n");
        assert_eq!(out.expects[0].to, (CLIENT, 40000));
        // passive answers of a server that is not translated: expected, not rewritten
        for p in [
            &b"227 Entering Passive Mode (198,18,61,2,195,80).\r\n"[..],
            b"229 Entering Extended Passive Mode (|||50000|)\r\n",
        ] {
            let mut out = Out::default();
            help(&snat(Dir::Reply), p, &mut out);
            assert_eq!(
                out.expects,
                vec![Expect {
                    proto: 6,
                    dst: (SERVER, 50000),
                    to: (SERVER, 50000),
                    sport: None
                }],
                "{}",
                String::from_utf8_lossy(p)
            );
            // the master is translated (the client's side), yet the server's address is
            // what the client reaches: no edit
            assert!(out.edits.is_empty());
        }
    }

    #[test]
    fn a_server_behind_dnat_has_its_passive_answer_rewritten() {
        // client 198.18.60.2:40000 -> VIP 198.18.60.100:21, DNAT to 10.0.0.9:21
        let (c, vip, srv) = (0xc612_3c02, 0xc612_3c64, 0x0a00_0009);
        let orig = t(c, 40000, vip, 21, false);
        let reply = t(srv, 21, c, 40000, false);
        let cx = Cx {
            dir: Dir::Reply,
            this: reply,
            other: orig,
        };
        let p = b"227 Entering Passive Mode (10,0,0,9,195,80)\r\n";
        let mut out = Out::default();
        help(&cx, p, &mut out);
        assert_eq!(
            apply(p, &out),
            b"227 Entering Passive Mode (198,18,60,100,195,80)\r\n"
        );
        assert_eq!(out.expects[0].dst, (vip, 50000));
        assert_eq!(out.expects[0].to, (srv, 50000));
        let p = b"229 Extended (|||50000|)\r\n";
        let mut out = Out::default();
        help(&cx, p, &mut out);
        assert!(out.edits.is_empty(), "the port is kept");
        assert_eq!(out.expects[0].dst, (vip, 50000));
    }

    #[test]
    fn ipv6_eprt() {
        let a: u128 = "2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap().into();
        let b: u128 = "2001:db8:1::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .into();
        let s: u128 = "2001:db8:1::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .into();
        let cx = Cx {
            dir: Dir::Original,
            this: t(a, 40000, s, 21, true),
            other: t(s, 21, b, 40000, true),
        };
        let p = b"EPRT |2|2001:db8::2|40001|\r\n";
        let mut out = Out::default();
        help(&cx, p, &mut out);
        assert_eq!(apply(p, &out), b"EPRT |2|2001:db8:1::1|40001|\r\n");
        // PORT is IPv4 only
        let mut out = Out::default();
        help(&cx, b"PORT 1,2,3,4,5,6\r\n", &mut out);
        assert!(out.expects.is_empty());
    }

    #[test]
    fn others_addresses_and_garbage_are_ignored() {
        for p in [
            &b"PORT 10,0,0,3,1,2\r\n"[..], // not the sender's address
            b"PORT 10,0,0,2,1\r\n",
            b"PORT 10,0,0,2,1,2",
            b"PORT 300,0,0,2,1,2\r\n",
            b"PORT 10,0,0,2,0,0\r\n",
            b"EPRT |1|10.0.0.2|99999|\r\n",
            b"EPRT |1|10.0.0.2|",
            b"EPRT x1x10.0.0.2x5x\r\n",
            b"RETR PORT 10,0,0,2,1,2\r\n",
            b"",
        ] {
            let mut out = Out::default();
            help(&snat(Dir::Original), p, &mut out);
            assert_eq!(out, Out::default(), "{}", String::from_utf8_lossy(p));
        }
        for p in [
            &b"227 (10,0,0,2"[..],
            b"229 (||12|)\r\n",
            b"229 (|||70000|)\r\n",
            b"227 no parenthesis\r\n(1,2,3,4,5,6)",
        ] {
            let mut out = Out::default();
            help(&snat(Dir::Reply), p, &mut out);
            assert_eq!(out, Out::default(), "{}", String::from_utf8_lossy(p));
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_edits_stay_in_bounds(p in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
                                                 head in 0usize..6) {
            let heads: [&[u8]; 6] = [b"PORT ", b"EPRT |", b"227 (", b"229 (|||", b"", b"EPRT |2|"];
            let mut v = heads[head].to_vec();
            v.extend_from_slice(&p);
            for dir in [Dir::Original, Dir::Reply] {
                let mut out = Out::default();
                help(&snat(dir), &v, &mut out);
                for e in &out.edits {
                    proptest::prop_assert!(e.at + e.len <= v.len());
                }
            }
        }
    }
}
