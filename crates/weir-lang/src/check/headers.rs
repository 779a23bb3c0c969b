//! Selectors that are not one field of the table: SCTP chunks (`sctp chunk data tsn`), TCP
//! options (`tcp option maxseg size`) and the inner packet of a tunnel (`vxlan ip saddr`,
//! an [`Source::Inner`]), each typed here.

use super::tables::{err, Cx};
use crate::ast;
use crate::ir::*;
use crate::source::Span;
use crate::values;
use weir_wire::tunnel::Tunnel;
use weir_wire::{DataType, Field, Layer};

/// SCTP chunks and the widths of their fields (nft's `sctp_chunk.c`); every chunk also has
/// `type`, `flags` and `length`.
const SCTP_CHUNKS: &[(&str, &[(&str, u8)])] = &[
    (
        "data",
        &[("tsn", 32), ("stream", 16), ("ssn", 16), ("ppid", 32)],
    ),
    ("init", INIT_FIELDS),
    ("init-ack", INIT_FIELDS),
    (
        "sack",
        &[
            ("cum-tsn-ack", 32),
            ("a-rwnd", 32),
            ("num-gap-ack-blocks", 16),
            ("num-dup-tsns", 16),
        ],
    ),
    ("heartbeat", &[]),
    ("heartbeat-ack", &[]),
    ("abort", &[]),
    ("shutdown", &[("cum-tsn-ack", 32)]),
    ("shutdown-ack", &[]),
    ("error", &[]),
    ("cookie-echo", &[]),
    ("cookie-ack", &[]),
    ("ecne", &[("lowest-tsn", 32)]),
    ("cwr", &[("lowest-tsn", 32)]),
    ("shutdown-complete", &[]),
    ("asconf-ack", &[("seqno", 32)]),
    ("forward-tsn", &[("new-cum-tsn", 32)]),
    ("asconf", &[("seqno", 32)]),
];
/// The chunk type of each of [`SCTP_CHUNKS`], in the same order (RFC 4960, 3758, 5061).
const SCTP_CHUNK_TYPES: &[u8] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 128, 192, 193,
];

const INIT_FIELDS: &[(&str, u8)] = &[
    ("init-tag", 32),
    ("a-rwnd", 32),
    ("num-outbound-streams", 16),
    ("num-inbound-streams", 16),
    ("initial-tsn", 32),
];

/// TCP options by name (nft's `tcpopt.c`: kind, and the widths of their fields); every
/// option also has `kind` and `length`, except eol and nop which have neither.
/// A header's sub-fields and their widths in bits.
type Widths = &'static [(&'static str, u8)];

const TCP_OPTIONS: &[(&str, u8, Widths)] = &[
    ("eol", 0, &[]),
    ("nop", 1, &[]),
    ("maxseg", 2, &[("size", 16)]),
    ("window", 3, &[("count", 8)]),
    ("sack-perm", 4, &[]),
    ("sack", 5, SACK_FIELDS),
    ("sack0", 5, SACK_FIELDS),
    ("sack1", 5, SACK_FIELDS),
    ("sack2", 5, SACK_FIELDS),
    ("sack3", 5, SACK_FIELDS),
    ("timestamp", 8, &[("tsval", 32), ("tsecr", 32)]),
    ("md5sig", 19, &[]),
    ("mptcp", 30, &[("subtype", 4)]), // (typed as MptcpSubtype below)
    ("fastopen", 34, &[]),
];
const SACK_FIELDS: &[(&str, u8)] = &[("left", 32), ("right", 32)];

/// The tunnel headers whose inner packet a selector reads.
pub(super) const TUNNEL_NAMES: &[&str] = &["vxlan", "geneve", "gre", "gretap"];

/// VXLAN and Geneve are found by their UDP port: nft needs the rule to match it first
/// (`udp dport 4789 vxlan vni 10`).
pub(super) fn udp_tunnel_ok(cx: &mut Cx, t: &str, span: Span) -> bool {
    if matches!(t, "vxlan" | "geneve") && !cx.udp_dport_seen {
        let port = if t == "vxlan" { 4789 } else { 6081 };
        err(
            cx,
            span,
            format!("{t} is found by its UDP port: match it first (udp dport {port} {t} ...)"),
        );
        return false;
    }
    true
}

/// A field of a tunnel's inner packet or own header, as a key part.
pub(super) fn inner_part(tunnel: Tunnel, f: Field) -> KeyPart {
    KeyPart {
        src: Source::Inner { tunnel, field: f },
        and: u128::MAX,
        xor: 0,
        shift: 0,
        dtype: f.datatype(),
    }
}

/// The tunnel whose own header field `f` is (`vxlan vni`: VXLAN).
pub(super) fn tunnel_of(f: Field) -> Option<Tunnel> {
    [Tunnel::Vxlan, Tunnel::Geneve, Tunnel::Gre]
        .into_iter()
        .find(|t| t.owns(f))
}

/// A selector's words as written.
pub(super) fn target_text(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Selector(ws, _) => ws
            .iter()
            .map(|w| w.name.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The name of TCP option kind `k` (`maxseg` for 2).
pub(crate) fn tcp_option_name(k: u128) -> Option<&'static str> {
    TCP_OPTIONS.iter().find(|o| o.1 as u128 == k).map(|o| o.0)
}

/// Whether `w` names a TCP option (`maxseg`) or is a kind number 0-255.
/// A TCP option's kind by name or number (`maxseg`, `2`).
pub(super) fn tcp_option_kind(w: &str) -> Option<u8> {
    match TCP_OPTIONS.iter().find(|o| o.0 == w) {
        Some(o) => Some(o.1),
        None => values::parse_number(w)
            .filter(|k| *k <= 255)
            .map(|k| k as u8),
    }
}

pub(super) fn tcp_option_known(w: &str) -> bool {
    TCP_OPTIONS.iter().any(|o| o.0 == w) || values::parse_number(w).is_some_and(|k| k <= 255)
}

/// Selectors whose words are not one field of the table: SCTP chunks, TCP options, the
/// inner packet of a tunnel. None: not one of these.
pub(super) fn special_key(cx: &mut Cx, words: &[ast::Ident], span: Span) -> Option<Option<Key>> {
    let w: Vec<&str> = words.iter().map(|w| w.name.as_str()).collect();
    let part = |f: Field, bits: Option<u8>| {
        let mut p = KeyPart::field(f);
        if let Some(b) = bits {
            p.dtype = DataType::Integer(b);
        }
        p
    };
    let ext = |proto: u8, kind: u8, offset: u8, len: u8, dtype: DataType| KeyPart {
        src: Source::Exthdr {
            proto,
            kind,
            offset,
            len,
            present: dtype == DataType::Boolean,
        },
        and: u128::MAX,
        xor: 0,
        shift: 0,
        dtype,
    };
    match w.as_slice() {
        ["sctp", "chunk", chunk, rest @ ..] => {
            let Some(ci) = SCTP_CHUNKS.iter().position(|(n, _)| n == chunk) else {
                let names: Vec<&str> = SCTP_CHUNKS.iter().map(|c| c.0).collect();
                err(
                    cx,
                    words[2].span,
                    format!(
                        "unknown SCTP chunk '{chunk}' (one of: {})",
                        names.join(", ")
                    ),
                );
                return Some(None);
            };
            let (_, fields) = SCTP_CHUNKS[ci];
            let kind = SCTP_CHUNK_TYPES[ci];
            Some(match rest {
                [] => Some(vec![ext(132, kind, 0, 1, DataType::Boolean)]),
                [f] => {
                    // a chunk's fields follow its 4-byte header, in order
                    let at = match *f {
                        "type" => Some((0, 8)),
                        "flags" => Some((1, 8)),
                        "length" => Some((2, 16)),
                        f => {
                            let mut off = 4u8;
                            let mut found = None;
                            for (n, b) in fields.iter() {
                                if *n == f {
                                    found = Some((off, *b));
                                    break;
                                }
                                off += b / 8;
                            }
                            found
                        }
                    };
                    match at {
                        Some((off, b)) => {
                            Some(vec![ext(132, kind, off, b / 8, DataType::Integer(b))])
                        }
                        None => {
                            err(
                                cx,
                                words[3].span,
                                format!("an SCTP {chunk} chunk has no field '{f}'"),
                            );
                            None
                        }
                    }
                }
                _ => {
                    err(cx, span, "expected: sctp chunk TYPE [FIELD]");
                    None
                }
            })
        }
        // a bridge port's VLAN metadata (`meta ibrpvid`, `meta ibrvproto`): typed, not
        // evaluated (weir has no bridge ports)
        ["meta", k @ ("ibrpvid" | "ibrvproto")] => {
            cx.uneval.push("bridge metadata");
            let mut p = part(Field::MetaBroute, Some(16));
            if *k == "ibrvproto" {
                p.dtype = DataType::EtherType;
            }
            Some(Some(vec![p]))
        }
        // an IPv4 option's field (`ip option ra value`): typed, not evaluated (weir does not
        // parse IP options)
        ["ip", "option", opt, rest @ ..] => {
            if !matches!(*opt, "lsrr" | "rr" | "ssrr" | "ra") {
                err(
                    cx,
                    words[2].span,
                    format!("unknown IP option '{opt}' (lsrr, rr, ssrr, ra)"),
                );
                return Some(None);
            }
            let bits = match rest {
                [] => Some(1),
                ["type" | "length" | "ptr"] => Some(8),
                ["value"] if *opt == "ra" => Some(16),
                ["addr"] if *opt != "ra" => Some(32),
                _ => None,
            };
            let Some(b) = bits else {
                err(cx, span, format!("the IP option {opt} has no such field"));
                return Some(None);
            };
            cx.uneval.push("ip option");
            Some(Some(vec![part(Field::TcpOptionField, Some(b))]))
        }
        // the VLAN priority (3 bits of the tag), not a field of weir's yet: typed as 3 bits of
        // the tag and not evaluated
        ["vlan", "pcp"] => {
            cx.uneval.push("vlan pcp");
            Some(Some(vec![part(Field::VlanId, Some(3))]))
        }
        // raw option bytes: `tcp option @255,8,8`
        ["tcp", "option", raw, off, len] if raw.starts_with('@') => {
            let kind = values::parse_number(&raw[1..]).filter(|&k| k <= 255);
            let off = values::parse_number(off);
            let len = values::parse_number(len).filter(|&l| (1..=128).contains(&l));
            match (kind, off, len) {
                // whole bytes: evaluated
                (Some(k), Some(o), Some(l)) if o % 8 == 0 && l % 8 == 0 && o / 8 < 40 => {
                    Some(Some(vec![ext(
                        6,
                        k as u8,
                        (o / 8) as u8,
                        (l / 8) as u8,
                        DataType::Integer(l as u8),
                    )]))
                }
                (Some(_), Some(_), Some(l)) => {
                    cx.uneval.push("tcp option");
                    Some(Some(vec![part(Field::TcpOptionField, Some(l as u8))]))
                }
                _ => {
                    err(
                        cx,
                        span,
                        "expected tcp option @KIND,OFFSET,LENGTH (kind 0-255, length 1-128 bits)",
                    );
                    Some(None)
                }
            }
        }
        // a segment of the IPv6 routing header: `srh sid[1]`
        // (nft: 16 bytes at 8 + 16 (N - 1) in the routing header, of whatever type, as the
        // kernel's nft_exthdr finds it)
        ["srh", sid] if sid.starts_with("sid[") => {
            let n = sid
                .strip_prefix("sid[")
                .and_then(|r| r.strip_suffix(']'))
                .and_then(values::parse_number);
            let Some(n) = n.filter(|n| (1..=15).contains(n)) else {
                err(
                    cx,
                    span,
                    "expected srh sid[N] with a segment number (weir reads segments 1-15)",
                );
                return Some(None);
            };
            Some(Some(vec![KeyPart {
                src: Source::Exthdr {
                    proto: weir_wire::meta::proto::ROUTING,
                    kind: 0,
                    offset: (8 + 16 * (n - 1)) as u8,
                    len: 16,
                    present: false,
                },
                and: u128::MAX,
                xor: 0,
                shift: 0,
                dtype: DataType::Ipv6Addr,
            }]))
        }
        ["tcp", "option", opt, rest @ ..] => {
            let known = TCP_OPTIONS.iter().find(|(n, _, _)| n == opt);
            let kind = match (known, values::parse_number(opt)) {
                (Some((_, k, _)), _) => *k,
                (None, Some(k)) if k <= 255 => k as u8,
                _ => 0,
            };
            let fields: &[(&str, u8)] = match (known, values::parse_number(opt)) {
                (Some((_, _, f)), _) => f,
                (None, Some(k)) if k <= 255 => &[],
                (None, Some(_)) => {
                    err(
                        cx,
                        words[2].span,
                        format!("TCP option kind {opt} is out of range (0-255)"),
                    );
                    return Some(None);
                }
                (None, None) => {
                    let names: Vec<&str> = TCP_OPTIONS.iter().map(|c| c.0).collect();
                    err(
                        cx,
                        words[2].span,
                        format!(
                            "unknown TCP option '{opt}' (a number 0-255 or one of: {})",
                            names.join(", ")
                        ),
                    );
                    return Some(None);
                }
            };
            let single = matches!(*opt, "eol" | "nop");
            Some(match rest {
                [] => Some(vec![ext(6, kind, 0, 1, DataType::Boolean)]),
                [f] => {
                    // an option's fields follow its kind and length bytes, in order (the
                    // SACK blocks sack0..3 at 2, 10, 18, 26)
                    let base = match *opt {
                        "sack1" => 10,
                        "sack2" => 18,
                        "sack3" => 26,
                        _ => 2u8,
                    };
                    let at = match *f {
                        "kind" if !single => Some((0, 8)),
                        "length" if !single => Some((1, 8)),
                        f => {
                            let mut off = base;
                            let mut found = None;
                            for (n, b) in fields.iter() {
                                if *n == f {
                                    found = Some((off, *b));
                                    break;
                                }
                                off += b.div_ceil(8);
                            }
                            found
                        }
                    };
                    match at {
                        Some((off, b)) => {
                            let mut p = ext(6, kind, off, b.div_ceil(8), DataType::Integer(b));
                            if *opt == "mptcp" && *f == "subtype" {
                                // the high 4 bits of the byte after the length
                                p.dtype = DataType::MptcpSubtype;
                                p.and = 0xf0;
                                p.shift = 4;
                            }
                            Some(vec![p])
                        }
                        None => {
                            err(
                                cx,
                                words[3].span,
                                format!("TCP option {opt} has no field '{f}'"),
                            );
                            None
                        }
                    }
                }
                _ => {
                    err(cx, span, "expected: tcp option NAME [FIELD]");
                    None
                }
            })
        }
        [t @ ("vxlan" | "geneve" | "gre" | "gretap"), inner @ ..]
            if inner.len() >= 2 && Field::from_name(&w[..2].join(" ")).is_none() =>
        {
            // the inner packet's field (its family is the inner packet's, not the table's);
            // GRE carries IP packets, the others Ethernet frames
            let name = inner.join(" ");
            // (inside, `meta` reads only the inner protocol and transport protocol)
            let Some(f) = Field::from_name(&name).filter(|f| {
                f.evaluated()
                    && (f.is_header() || matches!(f, Field::MetaProtocol | Field::MetaL4proto))
            }) else {
                err(
                    cx,
                    words[1].span.to(span),
                    format!("unknown selector '{name}' in a {t} packet"),
                );
                return Some(None);
            };
            if *t == "gre" && f.layer() == Layer::Link {
                err(
                    cx,
                    words[1].span.to(span),
                    format!(
                        "a gre packet carries IP, not Ethernet: '{name}' (gretap carries Ethernet)"
                    ),
                );
                return Some(None);
            }
            if !udp_tunnel_ok(cx, t, words[0].span) {
                return Some(None);
            }
            let tunnel = Tunnel::from_name(t)?;
            Some(Some(vec![inner_part(tunnel, f)]))
        }
        ["fib", rest @ ..] if rest.len() >= 2 => {
            lower_fib(cx, rest, span).map(|p| p.map(|p| vec![p]))
        }
        ["osf", rest @ ..] => {
            let (ttl, key) = match rest {
                ["ttl", m, k] => (Some(*m), *k),
                [k] => (None, *k),
                _ => (Some(""), ""),
            };
            let f = match key {
                "name" => Field::OsfName,
                "version" => Field::OsfVersion,
                _ => {
                    err(cx, span, "expected: osf [ttl loose|skip] name|version");
                    return Some(None);
                }
            };
            if ttl.is_some_and(|m| !matches!(m, "loose" | "skip")) {
                err(cx, span, "osf ttl is loose or skip");
                return Some(None);
            }
            // nft_osf_validate: ip and inet tables, the prerouting, input and forward hooks
            if !matches!(cx.family, Family::Ip | Family::Inet) {
                err(cx, span, "osf is for ip and inet tables");
                return Some(None);
            }
            if let Some((_, h)) = cx.cur_hook {
                if !matches!(h, Hook::Prerouting | Hook::Input | Hook::Forward) {
                    err(
                        cx,
                        span,
                        format!(
                            "osf is not valid at the {} hook (prerouting, input, forward: the kernel's nft_osf_validate)",
                            h.name()
                        ),
                    );
                    return Some(None);
                }
            }
            Some(Some(vec![KeyPart {
                src: Source::Osf {
                    ttl: match ttl {
                        Some("loose") => 1,
                        Some(_) => 2,
                        None => 0,
                    },
                    version: f == Field::OsfVersion,
                },
                ..KeyPart::field(f)
            }]))
        }
        ["ipsec", dir, rest @ ..] => {
            if !matches!(*dir, "in" | "out") {
                err(
                    cx,
                    words[1].span,
                    format!("ipsec looks at the way in or out, not '{dir}'"),
                );
                return Some(None);
            }
            // nft_xfrm_validate: the way in before routing to the host or on, the way out
            // after
            if let Some((_, h)) = cx.cur_hook {
                let ok = match *dir {
                    "in" => matches!(h, Hook::Prerouting | Hook::Input | Hook::Forward),
                    _ => matches!(h, Hook::Forward | Hook::Output | Hook::Postrouting),
                };
                if !ok {
                    err(
                        cx,
                        span,
                        format!("ipsec {dir} is not read at the {} hook", h.name()),
                    );
                    return Some(None);
                }
            }
            let key = match rest {
                ["spnum", n, k @ ..] => {
                    if values::parse_number(n).is_none_or(|n| n > 255) {
                        err(
                            cx,
                            words[3].span,
                            format!("spnum {n}: a policy number 0-255"),
                        );
                        return Some(None);
                    }
                    k
                }
                k => k,
            };
            match Field::from_name(&format!("ipsec {}", key.join(" "))) {
                Some(f) => Some(Some(vec![KeyPart::field(f)])),
                None => {
                    err(cx, span, format!("unknown ipsec key '{}' (reqid, spi, ip saddr, ip daddr, ip6 saddr, ip6 daddr)", key.join(" ")));
                    Some(None)
                }
            }
        }
        [base @ ("@ll" | "@nh" | "@th" | "@ih"), off, len] => {
            let off = values::parse_number(off).filter(|&o| o < 1 << 16);
            let len = values::parse_number(len).filter(|l| (1..=128).contains(l));
            match (off, len) {
                (Some(o), Some(l)) => Some(Some(vec![KeyPart {
                    src: Source::Raw {
                        base: match *base {
                            "@ll" => 0,
                            "@nh" => 1,
                            "@th" => 2,
                            _ => 3,
                        },
                        offset: o as u16,
                        len: l as u8,
                    },
                    and: u128::MAX,
                    xor: 0,
                    shift: 0,
                    dtype: DataType::Integer(l as u8),
                }])),
                _ => {
                    err(
                        cx,
                        span,
                        format!(
                            "{base},OFFSET,LENGTH: an offset in bits and a length of 1 to 128 bits"
                        ),
                    );
                    Some(None)
                }
            }
        }
        _ => None,
    }
}

/// `fib FLAGS RESULT` (`fib saddr . iif oif`): a route lookup with nft's flags and result
/// (`nft_fib_init`'s checks, and `nft_fib_validate`'s hooks when the chain is a base chain).
/// `check` is the oif lookup with `NFTA_FIB_F_PRESENT` (`fib daddr oif exists`).
fn lower_fib(cx: &mut Cx, rest: &[&str], span: Span) -> Option<Option<KeyPart>> {
    use crate::ir::fib::*;
    let (flags, result) = rest.split_at(rest.len() - 1);
    let has = |f: &str| flags.contains(&f);
    let why = if let Some(f) = flags
        .iter()
        .find(|f| !matches!(**f, "saddr" | "daddr" | "mark" | "iif" | "oif"))
    {
        Some(format!(
            "unknown fib flag '{f}' (saddr, daddr, mark, iif, oif)"
        ))
    } else if has("saddr") == has("daddr") {
        Some("fib looks up one address: saddr or daddr".to_string())
    } else if has("iif") && has("oif") {
        Some("fib takes iif or oif, not both".to_string())
    } else {
        None
    };
    if let Some(why) = why {
        err(cx, span, why);
        return Some(None);
    }
    let mut bits = 0u8;
    for (name, b) in [
        ("saddr", F_SADDR),
        ("daddr", F_DADDR),
        ("mark", F_MARK),
        ("iif", F_IIF),
        ("oif", F_OIF),
    ] {
        if has(name) {
            bits |= b;
        }
    }
    let (f, res) = match result[0] {
        "oif" => (Field::FibOif, RESULT_OIF),
        "oifname" => (Field::FibOifname, RESULT_OIFNAME),
        "type" => (Field::FibType, RESULT_ADDRTYPE),
        "check" => (Field::FibCheck, RESULT_OIF),
        other => {
            err(
                cx,
                span,
                format!("fib gives oif, oifname, type or check, not '{other}'"),
            );
            return Some(None);
        }
    };
    if f == Field::FibCheck {
        bits |= F_PRESENT;
    }
    if res != RESULT_ADDRTYPE && bits & F_OIF != 0 {
        err(
            cx,
            span,
            "fib ... oif: a lookup that gives the output device takes iif, not oif",
        );
        return Some(None);
    }
    // nft_fib_validate: the hooks where the lookup has what it needs (by number: netdev's
    // ingress is prerouting's 0, egress input's 1)
    if let Some((_, hook)) = cx.cur_hook {
        let hook = match hook {
            Hook::Ingress => Hook::Prerouting,
            Hook::Egress => Hook::Input,
            h => h,
        };
        let ok = match (res, bits & F_IIF != 0, bits & F_OIF != 0) {
            // (the kernel here, 6.18, takes `fib daddr oif missing` at input and forward too)
            (RESULT_OIF | RESULT_OIFNAME, _, _) => {
                matches!(hook, Hook::Prerouting | Hook::Input | Hook::Forward)
            }
            (_, true, _) => matches!(hook, Hook::Prerouting | Hook::Input | Hook::Forward),
            (_, _, true) => matches!(hook, Hook::Output | Hook::Postrouting | Hook::Forward),
            _ => matches!(
                hook,
                Hook::Prerouting | Hook::Input | Hook::Forward | Hook::Output | Hook::Postrouting
            ),
        };
        if !ok {
            err(
                cx,
                span,
                format!(
                    "fib {} {} is not valid at the {} hook (the kernel's nft_fib_validate)",
                    flags.join(" . "),
                    result[0],
                    hook.name()
                ),
            );
            return Some(None);
        }
    }
    Some(Some(KeyPart {
        src: Source::Fib {
            flags: bits,
            result: res,
        },
        and: u128::MAX,
        xor: 0,
        shift: 0,
        dtype: f.datatype(),
    }))
}
