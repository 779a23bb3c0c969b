//! The `.t.payload` files of nftables' rule tests read into typed expressions.
//!
//! A block is
//!
//! ```text
//! # ip protocol tcp tcp dport ssh accept
//! __set%d test-ip4 3            (anonymous sets: declaration, then elements)
//! __set%d test-ip4 0
//!     element 0016 element 0050  (elements: tab-separated)
//! ip test-ip4 input
//!   [ payload load 1b @ network header + 9 => reg 1 ]
//!   [ cmp eq reg 1 0x06 ]
//!   ...
//! ```
//!
//! Constants are printed by libnftnl in the byte order of the data they compare with: data in
//! network order (payload, `meta protocol`, addresses, after `byteorder hton`) as its bytes in
//! memory (`0xc0a80301` is 192.168.3.1), data in host order (`meta mark`, `meta len`,
//! `meta iiftype`, `ct mark` ...) as its value (`0x00000004` is mark 4: bytes `04 00 00 00`
//! on a little-endian machine, which is what the kernel's registers hold there). [`resolve`]
//! turns every constant into the bytes the registers hold, following where each register's
//! data came from.

use std::collections::BTreeMap;

/// Where a payload load reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    Link,
    Network,
    Transport,
    Inner,
}

/// What an `exthdr` expression looks for: an IPv6 extension header, a TCP option, an SCTP
/// chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExtKind {
    Ipv6,
    Tcp,
    Sctp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Neq,
    Lt,
    Lte,
    Gt,
    Gte,
}

impl CmpOp {
    /// Whether a memcmp result `d` satisfies the operator (as `nft_cmp_eval`).
    pub fn holds(self, d: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => d == Equal,
            CmpOp::Neq => d != Equal,
            CmpOp::Lt => d == Less,
            CmpOp::Lte => d != Greater,
            CmpOp::Gt => d == Greater,
            CmpOp::Gte => d != Less,
        }
    }
}

/// One expression. Registers are 4-byte word indexes into the kernel's `nft_regs.data`
/// (`reg 1` .. `reg 4` are words 4, 8, 12, 16; `reg 8` .. `reg 23`, the 32-bit registers
/// `NFT_REG32_00` .., are words 4 ..).
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Payload {
        base: Base,
        off: usize,
        len: usize,
        dreg: usize,
    },
    Meta {
        key: String,
        dreg: usize,
    },
    Ct {
        key: String,
        dreg: usize,
    },
    /// `meta set KEY with reg R`
    MetaSet {
        key: String,
        sreg: usize,
    },
    Bitwise {
        dreg: usize,
        sreg: usize,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Shift {
        dreg: usize,
        sreg: usize,
        left: bool,
        n: u32,
        len: usize,
    },
    Byteorder {
        dreg: usize,
        sreg: usize,
        len: usize,
        size: usize,
    },
    Cmp {
        op: CmpOp,
        sreg: usize,
        data: Vec<u8>,
    },
    Range {
        neq: bool,
        sreg: usize,
        from: Vec<u8>,
        to: Vec<u8>,
    },
    /// `lookup reg R set NAME [dreg D] [0x1]`: `set` indexes the block's sets. Also `objref
    /// sreg R set NAME` (`objref: Some(kind)`, the kind of the map's objects: 1 counter, 2
    /// quota, 4 limit): the object the map gives for the key, a miss stops the rule
    /// (`nft_objref_map_eval`).
    Lookup {
        sreg: usize,
        set: usize,
        dreg: Option<usize>,
        invert: bool,
        objref: Option<u8>,
    },
    /// `objref type T name N`: the named object N of kind T (1 counter, 2 quota, 4 limit, 3
    /// ct helper ...). [`super::objects::fill`] turns a counter, quota or limit into the
    /// expression it evaluates as (`nft_objref_eval` runs the object's own `eval`).
    Objref {
        kind: u8,
        name: String,
    },
    Immediate {
        dreg: usize,
        data: Vec<u8>,
    },
    /// `immediate reg 0 VERDICT`
    Verdict(String),
    Counter,
    /// `numgen reg R = inc mod M [offset O]` on a fresh rule: its first value, O.
    Numgen {
        dreg: usize,
        offset: u32,
    },
    /// `nat snat|dnat ip|ip6 addr_min reg R [addr_max reg R] [proto_min reg R] [proto_max
    /// reg R] [flags F]`, `redir ...`, `masq ...`: ends the rule with its translation.
    Nat {
        kind: String,
        /// 4 or 6 (the statement's family: nothing for a packet of the other one).
        family: Option<u8>,
        addr: Option<(usize, usize)>,
        proto: Option<(usize, usize)>,
    },
    /// `ct set mark with reg R`
    CtSetMark {
        sreg: usize,
    },
    /// A statement that cannot stop the rule: `log`, `notrack`, `dup`, or one that
    /// ends it (`end`): `reject`, `nat`, `redir`, `masq`, `queue num`.
    Stmt {
        kind: String,
        end: bool,
    },
    /// `limit rate N/UNIT burst B type packets|bytes flags F` (F 0x1: `over`): a fresh
    /// token bucket (the rule has seen no packet yet).
    Limit {
        rate: u64,
        unit_secs: u64,
        burst: u64,
        bytes: bool,
        invert: bool,
    },
    /// `quota bytes N consumed C flags F` (F 1: `over`).
    Quota {
        bytes: u64,
        consumed: u64,
        invert: bool,
    },
    /// `payload write reg R => Nb @ BASE header + OFF csum_type ...`
    PayloadWrite {
        base: Base,
        off: usize,
        len: usize,
        sreg: usize,
    },
    /// `exthdr reset tcpopt TYPE` (`reset tcp option`): the first TCP option of the type
    /// turned into NOPs (nft_exthdr_tcp_strip_eval).
    ExthdrReset {
        typ: u8,
    },
    /// `exthdr load [ipv6|tcpopt] Nb @ TYPE + OFF [present] => reg R` (no keyword: SCTP).
    Exthdr {
        kind: ExtKind,
        typ: u8,
        off: usize,
        len: usize,
        present: bool,
        dreg: usize,
    },
    /// `fib FLAG[ . FLAG...] oif|oifname|type [present] => reg R`: a route lookup
    /// ([`super::fibenv`]); `flags` the words saddr, daddr, mark, iif, oif.
    Fib {
        flags: Vec<String>,
        result: String,
        present: bool,
        dreg: usize,
    },
    /// `inner type T hdrsize H flags F [ LOAD ]`: a load in a tunnel's inner packet or
    /// header, as `nft_inner_eval` runs it ([`super::inner`]): `typ` 1 VXLAN, 2 Geneve, 3
    /// GRE, 4 GRETAP; `flags` the `NFT_INNER_*` bits (1 hdrsize, 2 link layer, 4 network, 8
    /// transport header).
    Inner {
        typ: u8,
        hdrsize: u8,
        flags: u8,
        load: InnerLoad,
        dreg: usize,
    },
    /// `synproxy mss M wscale W` (`nft_synproxy_do_eval`): not TCP, NFT_BREAK; a TCP
    /// segment with a wrong checksum (dropped) or with SYN or ACK (taken) ends the rule
    /// there; any other goes on.
    Synproxy,
    /// `socket load KEY`, `tproxy ...` (`nft_socket`, `nft_tproxy`) and `xfrm load ...`
    /// (`nft_xfrm`): the oracle's host has no local sockets and decrypts no IPsec, so each
    /// finds nothing and stops the rule (NFT_BREAK), as the kernel's do (weir is compared given
    /// no sockets either; its lookups are checked against real sockets by
    /// tests/lab/tproxy.sh).
    Absent,
    /// `rt load ipsec|classid` (`nft_rt`): no route has an IPsec transformation or a realm
    /// (0, `len` bytes); before routing (prerouting) the rule stops.
    RtZero {
        len: usize,
        dreg: usize,
    },
    /// An expression the oracle does not evaluate: its kind (and key).
    Unknown(String),
}

/// What an `inner` expression loads.
#[derive(Clone, Debug, PartialEq)]
pub enum InnerLoad {
    /// `payload load Nb @ BASE header + OFF` of the inner packet.
    Payload {
        base: InnerBase,
        off: usize,
        len: usize,
    },
    /// `meta load protocol` / `meta load l4proto` of the inner packet.
    Meta(String),
}

/// Where an inner payload load reads (`NFT_PAYLOAD_TUN_HEADER`, `_LL_`, `_NETWORK_`,
/// `_TRANSPORT_HEADER` in the inner context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InnerBase {
    Tunnel,
    Link,
    Network,
    Transport,
}

/// `inner type 1 hdrsize 8 flags f [ payload load 3b @ tunnel header + 4 => reg 1 ]` split
/// in words (the closing bracket of the outer expression already taken off).
fn parse_inner(t: &[&str]) -> Option<Expr> {
    if t.get(1) != Some(&"type") || t.get(3) != Some(&"hdrsize") || t.get(5) != Some(&"flags") {
        return None;
    }
    let typ: u8 = t.get(2)?.parse().ok()?;
    let hdrsize: u8 = t.get(4)?.parse().ok()?;
    let flags = u8::from_str_radix(t.get(6)?.trim_start_matches("0x"), 16).ok()?;
    if t.get(7) != Some(&"[") {
        return None;
    }
    let n = &t[8..];
    let (load, dreg) = match n {
        ["payload", "load", len, "@", base, "header", "+", off, "=>", "reg", r, ..] => {
            let base = match *base {
                "tunnel" => InnerBase::Tunnel,
                "link" => InnerBase::Link,
                "network" => InnerBase::Network,
                "transport" => InnerBase::Transport,
                _ => return None,
            };
            let load = InnerLoad::Payload {
                base,
                off: off.parse().ok()?,
                len: len.trim_end_matches('b').parse().ok()?,
            };
            (load, reg_arg(r)?)
        }
        ["meta", "load", key, "=>", "reg", r, ..] => {
            (InnerLoad::Meta(key.to_string()), reg_arg(r)?)
        }
        _ => return None,
    };
    Some(Expr::Inner {
        typ,
        hdrsize,
        flags,
        load,
        dreg,
    })
}

/// A set element as the block prints it; `key`/`end` in register layout (each component
/// padded to 4 bytes) once resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Elem {
    pub key: Vec<u8>,
    /// The padded length of each component of the key.
    pub comps: Vec<usize>,
    /// `KEY - END`: a range of (concatenated) keys, each component inclusive.
    pub end: Option<Vec<u8>>,
    /// `flags 1` (NFT_SET_ELEM_INTERVAL_END): where an interval ends (exclusive).
    pub interval_end: bool,
    /// `flags 2` (NFT_SET_ELEM_CATCHALL): the `*` element, its key empty (the set's
    /// [`Set::catchall`]).
    pub catchall: bool,
    pub data: Option<ElemData>,
    raw_key: String,
    raw_end: Option<String>,
    raw_data: Option<String>,
}

impl Elem {
    /// An element covering `key` to `end` (each component inclusive), in register layout.
    pub fn range(key: Vec<u8>, end: Vec<u8>, comps: Vec<usize>) -> Elem {
        Elem {
            key,
            comps,
            end: Some(end),
            interval_end: false,
            catchall: false,
            data: None,
            raw_key: String::new(),
            raw_end: None,
            raw_data: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ElemData {
    Verdict(String),
    Bytes(Vec<u8>),
    /// An object map's data: the object's name.
    Object(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Set {
    pub name: String,
    /// NFT_SET_* flags of the declaration (0x4: interval).
    pub flags: u32,
    pub elems: Vec<Elem>,
    /// The catch-all element (`element  : accept flags 2`): what a lookup finds when no
    /// element of `elems` holds the key (nft_set_catchall_lookup).
    pub catchall: Option<Elem>,
    /// A set of the `.t` file (`!NAME ...`), not in the block: its elements come from the
    /// rule's table ([`super::sets`]); whether the key the lookup builds is in host order.
    pub named: Option<bool>,
}

impl Set {
    pub fn interval(&self) -> bool {
        self.flags & 0x4 != 0
    }
}

/// One rule's block.
#[derive(Clone, Debug)]
pub struct Block {
    pub rule: String,
    pub family: String,
    pub table: String,
    pub chain: String,
    pub sets: Vec<Set>,
    pub exprs: Vec<Expr>,
    /// A line the parser did not understand (the block is not used).
    pub error: Option<String>,
    /// The named objects of the rule's table an object map's elements name, as the
    /// expression each evaluates as on a fresh object ([`Expr::Counter`], [`Expr::Quota`],
    /// [`Expr::Limit`]); filled from the table's text by [`super::objects::fill`].
    pub objs: BTreeMap<String, Expr>,
}

/// The register word index of `reg N`.
pub fn reg_word(n: usize) -> Option<usize> {
    match n {
        0..=4 => Some(n * 4),
        8..=23 => Some(n - 4),
        _ => None,
    }
}

/// Number of register words.
pub const WORDS: usize = 24;

/// Data printed as hex words (`0x0016`, `0x00000000 0x000186a0`, `00000016`), in memory
/// order (network-order data) or as values (host order: little-endian here; a value of two
/// words, a u64 such as `meta time`, is printed most significant word first).
pub fn data_bytes(words: &[&str], host: bool) -> Option<Vec<u8>> {
    if host && words.len() == 2 {
        let mut v = data_bytes(words, false)?;
        v.reverse();
        return Some(v);
    }
    let mut out = Vec::new();
    for w in words {
        let h = w.strip_prefix("0x").unwrap_or(w);
        if h.is_empty() || h.len() % 2 != 0 || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let n = h.len() / 2;
        let mut b: Vec<u8> = (0..n)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        if host {
            b.reverse();
        }
        out.extend(b);
    }
    Some(out)
}

fn reg_arg(s: &str) -> Option<usize> {
    reg_word(s.trim_end_matches(',').parse().ok()?)
}

/// Parse one `[ ... ]` line (constants still raw: [`resolve`] converts them).
fn parse_expr(line: &str, raw: &mut Vec<Vec<String>>) -> Result<Expr, String> {
    let t: Vec<&str> = line.split_whitespace().collect();
    let bad = || format!("cannot read `{line}`");
    let hex = |ws: &[&str]| -> Vec<String> { ws.iter().map(|s| s.to_string()).collect() };
    let e = match t.first().copied() {
        Some("payload") if t.get(1) == Some(&"load") => {
            // payload load 2b @ transport header + 2 => reg 1
            let len: usize = t[2].trim_end_matches('b').parse().map_err(|_| bad())?;
            let base = match t[4] {
                "link" => Base::Link,
                "network" => Base::Network,
                "transport" => Base::Transport,
                "inner" => Base::Inner,
                _ => return Err(bad()),
            };
            let off: usize = t.get(7).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let dreg = t.get(10).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            if t.len() > 11 {
                return Ok(Expr::Unknown(format!("payload load {}", t[11..].join(" "))));
            }
            Expr::Payload {
                base,
                off,
                len,
                dreg,
            }
        }
        Some("exthdr") if t.get(1) == Some(&"reset") && t.get(2) == Some(&"tcpopt") => {
            let typ: u8 = t.get(3).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            Expr::ExthdrReset { typ }
        }
        Some("exthdr") if t.get(1) == Some(&"load") => {
            // exthdr load [ipv6|tcpopt] 1b @ 0 + 0 [present] => reg 1
            let (kind, k) = match t.get(2).copied() {
                Some("ipv6") => (ExtKind::Ipv6, 3),
                Some("tcpopt") => (ExtKind::Tcp, 3),
                _ => (ExtKind::Sctp, 2),
            };
            let len: usize = t
                .get(k)
                .and_then(|s| s.strip_suffix('b'))
                .and_then(|s| s.parse().ok())
                .ok_or_else(bad)?;
            if t.get(k + 1) != Some(&"@") || t.get(k + 3) != Some(&"+") {
                return Err(bad());
            }
            let typ: u8 = t.get(k + 2).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let off: usize = t.get(k + 4).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let present = t.get(k + 5) == Some(&"present");
            let r = k + 5 + present as usize;
            if t.get(r) != Some(&"=>") || t.get(r + 1) != Some(&"reg") {
                return Err(bad());
            }
            let dreg = t.get(r + 2).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            Expr::Exthdr {
                kind,
                typ,
                off,
                len,
                present,
                dreg,
            }
        }
        Some("inner") => match parse_inner(&t) {
            Some(e) => e,
            None => return Ok(Expr::Unknown("inner".into())),
        },
        Some("fib") => {
            // fib saddr . iif oif present => reg 1
            let arrow = t.iter().position(|w| *w == "=>").ok_or_else(bad)?;
            let present = t[arrow - 1] == "present";
            let r = arrow - 1 - present as usize;
            let result = t.get(r).filter(|_| r >= 2).ok_or_else(bad)?.to_string();
            if !matches!(result.as_str(), "oif" | "oifname" | "type") {
                return Ok(Expr::Unknown(format!("fib {result}")));
            }
            let flags: Vec<String> = t[1..r]
                .iter()
                .filter(|w| **w != ".")
                .map(|w| w.to_string())
                .collect();
            if t.get(arrow + 1) != Some(&"reg") {
                return Err(bad());
            }
            let dreg = t.get(arrow + 2).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            Expr::Fib {
                flags,
                result,
                present,
                dreg,
            }
        }
        Some("meta") if t.get(1) == Some(&"load") => Expr::Meta {
            key: t[2].to_string(),
            dreg: t.get(5).and_then(|s| reg_arg(s)).ok_or_else(bad)?,
        },
        Some("meta") if t.get(1) == Some(&"set") => Expr::MetaSet {
            key: t[2].to_string(),
            sreg: t.get(5).and_then(|s| reg_arg(s)).ok_or_else(bad)?,
        },
        Some("ct") if t.get(1) == Some(&"load") => {
            let dreg = t.get(5).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            let mut key = t[2].to_string();
            if let Some(d) = t.iter().position(|w| *w == "dir") {
                key = format!("{key} {}", t.get(d + 1).copied().unwrap_or(""));
            }
            Expr::Ct { key, dreg }
        }
        Some("bitwise") => {
            // bitwise reg 1 = ( reg 1 & 0xfc ) ^ 0x00
            // bitwise reg 1 = ( reg 1 << 0x00000004 )
            let dreg = t.get(2).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            let sreg = t.get(6).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            let close = t.iter().position(|w| *w == ")").ok_or_else(bad)?;
            match t.get(7).copied() {
                Some("&") if t.get(close + 1) == Some(&"^") => {
                    raw.push(hex(&t[8..close]));
                    raw.push(hex(&t[close + 2..]));
                    Expr::Bitwise {
                        dreg,
                        sreg,
                        mask: Vec::new(),
                        xor: Vec::new(),
                    }
                }
                Some(op @ ("<<" | ">>")) if close == 9 => {
                    let n = data_bytes(&[t[8]], true).ok_or_else(bad)?;
                    let mut v = [0u8; 4];
                    v[..n.len().min(4)].copy_from_slice(&n[..n.len().min(4)]);
                    Expr::Shift {
                        dreg,
                        sreg,
                        left: op == "<<",
                        n: u32::from_le_bytes(v),
                        len: 0,
                    }
                }
                _ => Expr::Unknown(format!("bitwise {}", t[7..].join(" "))),
            }
        }
        Some("byteorder") => {
            // byteorder reg 1 = hton(reg 1, 4, 4)
            let dreg = t.get(2).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            let rest = t[4..].join(" ");
            let inner = rest
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(a, _)| a)
                .ok_or_else(bad)?;
            let a: Vec<&str> = inner.split(',').map(str::trim).collect();
            let sreg = a
                .first()
                .and_then(|s| s.strip_prefix("reg "))
                .and_then(reg_arg)
                .ok_or_else(bad)?;
            let size: usize = a.get(1).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let len: usize = a.get(2).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            Expr::Byteorder {
                dreg,
                sreg,
                len,
                size,
            }
        }
        Some("cmp") => {
            let op = match t.get(1).copied() {
                Some("eq") => CmpOp::Eq,
                Some("neq") => CmpOp::Neq,
                Some("lt") => CmpOp::Lt,
                Some("lte") => CmpOp::Lte,
                Some("gt") => CmpOp::Gt,
                Some("gte") => CmpOp::Gte,
                _ => return Err(bad()),
            };
            let sreg = t.get(3).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            raw.push(hex(&t[4..]));
            Expr::Cmp {
                op,
                sreg,
                data: Vec::new(),
            }
        }
        Some("range") => {
            let neq = match t.get(1).copied() {
                Some("eq") => false,
                Some("neq") => true,
                _ => return Err(bad()),
            };
            let sreg = t.get(3).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            let ws = &t[4..];
            if ws.len() % 2 != 0 {
                return Err(bad());
            }
            raw.push(hex(&ws[..ws.len() / 2]));
            raw.push(hex(&ws[ws.len() / 2..]));
            Expr::Range {
                neq,
                sreg,
                from: Vec::new(),
                to: Vec::new(),
            }
        }
        Some("lookup") => {
            // lookup reg 1 set __set%d [dreg 0] [0x1]
            let sreg = t.get(2).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            let name = t.get(4).ok_or_else(bad)?;
            let mut dreg = None;
            let mut invert = false;
            let mut i = 5;
            while i < t.len() {
                match t[i] {
                    "dreg" => {
                        dreg = Some(t.get(i + 1).and_then(|s| reg_arg(s)).ok_or_else(bad)?);
                        i += 1;
                    }
                    "0x1" => invert = true,
                    _ => return Ok(Expr::Unknown(format!("lookup {}", t[i]))),
                }
                i += 1;
            }
            raw.push(vec![name.to_string()]);
            Expr::Lookup {
                sreg,
                set: usize::MAX,
                dreg,
                invert,
                objref: None,
            }
        }
        Some("objref") if t.get(1) == Some(&"type") => Expr::Objref {
            kind: t.get(2).and_then(|s| s.parse().ok()).ok_or_else(bad)?,
            name: t.get(4).ok_or_else(bad)?.to_string(),
        },
        Some("objref") if t.get(1) == Some(&"sreg") => {
            // objref sreg 1 set __objmap%d: the map's object type is not printed; 0 until the
            // block's rule says (`counter name ... map`, see `parse_file`)
            let sreg = t.get(2).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            raw.push(vec![t.get(4).ok_or_else(bad)?.to_string()]);
            Expr::Lookup {
                sreg,
                set: usize::MAX,
                dreg: None,
                invert: false,
                objref: Some(0),
            }
        }
        Some("immediate") => {
            let dreg = t.get(2).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            if dreg == 0 {
                Expr::Verdict(t[3..].join(" "))
            } else {
                raw.push(hex(&t[3..]));
                Expr::Immediate {
                    dreg,
                    data: Vec::new(),
                }
            }
        }
        Some("counter") => Expr::Counter,
        Some("numgen") if t.get(4) == Some(&"inc") => Expr::Numgen {
            dreg: t.get(2).and_then(|s| reg_arg(s)).ok_or_else(bad)?,
            offset: match t.iter().position(|w| *w == "offset") {
                Some(i) => t.get(i + 1).and_then(|s| s.parse().ok()).ok_or_else(bad)?,
                None => 0,
            },
        },
        // adding to or deleting from a set with room: the rule goes on
        Some("dynset")
            if matches!(t.get(1), Some(&"add") | Some(&"delete")) && !line.contains("expr") =>
        {
            Expr::Stmt {
                kind: "dynset".into(),
                end: false,
            }
        }
        // `dup` (nft_dup_ipv4/ipv6/netdev): a copy sent elsewhere; the rule goes on
        Some(k @ ("log" | "notrack" | "last" | "dup")) => Expr::Stmt {
            kind: k.into(),
            end: false,
        },
        // `ct set event` (nft_ct's event mask): which events listeners get; the rule goes on
        Some("ct") if t.get(1) == Some(&"set") && t.get(2) == Some(&"event") => Expr::Stmt {
            kind: "ct set event".into(),
            end: false,
        },
        // `ct zone set`: a template for a packet conntrack has not seen (none of the oracle's
        // packets: they come tracked, untracked or invalid, after conntrack), so nothing;
        // `ct label set`: a bit of the connection's labels, which no later expression of the
        // rule reads
        Some("ct") if t.get(1) == Some(&"set") && matches!(t.get(2), Some(&"zone" | &"label")) => {
            Expr::Stmt {
                kind: format!("ct set {}", t[2]),
                end: false,
            }
        }
        Some("ct") if t.get(1) == Some(&"set") && t.get(2) == Some(&"mark") && t.len() == 6 => {
            Expr::CtSetMark {
                sreg: t.get(5).and_then(|s| reg_arg(s)).ok_or_else(bad)?,
            }
        }
        Some(k @ ("nat" | "redir" | "masq")) => {
            let reg_after = |w: &str| -> Result<Option<usize>, String> {
                match t.iter().position(|x| *x == w) {
                    Some(i) => Ok(Some(t.get(i + 2).and_then(|s| reg_arg(s)).ok_or_else(bad)?)),
                    None => Ok(None),
                }
            };
            let (kind, family) = match k {
                "nat" => (
                    t.get(1).copied().unwrap_or("").to_string(),
                    match t.get(2).copied() {
                        Some("ip") => Some(4),
                        Some("ip6") => Some(6),
                        _ => None,
                    },
                ),
                "redir" => ("redirect".to_string(), None),
                _ => ("masquerade".to_string(), None),
            };
            let (amin, amax) = (reg_after("addr_min")?, reg_after("addr_max")?);
            let (pmin, pmax) = (reg_after("proto_min")?, reg_after("proto_max")?);
            Expr::Nat {
                kind,
                family,
                addr: amin.map(|a| (a, amax.unwrap_or(a))),
                proto: pmin.map(|a| (a, pmax.unwrap_or(a))),
            }
        }
        Some("synproxy") => Expr::Synproxy,
        Some("socket" | "tproxy" | "xfrm") => Expr::Absent,
        // no tunnel metadata: `tunnel path` is 0, `tunnel id` stops the rule
        Some("tunnel") if t.get(2) == Some(&"id") => Expr::Absent,
        Some("tunnel") if t.get(2) == Some(&"path") => Expr::Meta {
            key: "tunnel path".into(),
            dreg: t.get(5).and_then(|s| reg_arg(s)).ok_or_else(bad)?,
        },
        Some("rt") if matches!(t.get(2), Some(&"ipsec" | &"classid")) => Expr::RtZero {
            len: if t[2] == "ipsec" { 1 } else { 4 },
            dreg: t.get(5).and_then(|s| reg_arg(s)).ok_or_else(bad)?,
        },
        Some(k @ "reject") => Expr::Stmt {
            kind: k.into(),
            end: true,
        },
        Some("queue") if matches!(t.get(1), Some(&"num") | Some(&"sreg_qnum")) => Expr::Stmt {
            kind: "queue".into(),
            end: true,
        },
        Some("limit") => {
            // limit rate 1025/second burst 512 type bytes flags 0x1
            let (rate, unit) = t.get(2).and_then(|s| s.split_once('/')).ok_or_else(bad)?;
            let unit_secs = match unit {
                "second" => 1,
                "minute" => 60,
                "hour" => 3600,
                "day" => 86400,
                "week" => 604800,
                _ => return Err(bad()),
            };
            Expr::Limit {
                rate: rate.parse().map_err(|_| bad())?,
                unit_secs,
                burst: t.get(4).and_then(|s| s.parse().ok()).ok_or_else(bad)?,
                bytes: t.get(6) == Some(&"bytes"),
                invert: t.get(8).is_some_and(|f| f.trim_start_matches("0x") == "1"),
            }
        }
        Some("quota") => Expr::Quota {
            bytes: t.get(2).and_then(|s| s.parse().ok()).ok_or_else(bad)?,
            consumed: t.get(4).and_then(|s| s.parse().ok()).ok_or_else(bad)?,
            invert: t.get(6) == Some(&"1"),
        },
        Some("payload") if t.get(1) == Some(&"write") => {
            // payload write reg 1 => 2b @ network header + 0 csum_type 1 csum_off 10 ...
            let sreg = t.get(3).and_then(|s| reg_arg(s)).ok_or_else(bad)?;
            let len: usize = t
                .get(5)
                .and_then(|s| s.trim_end_matches('b').parse().ok())
                .ok_or_else(bad)?;
            let base = match t.get(7).copied() {
                Some("link") => Base::Link,
                Some("network") => Base::Network,
                Some("transport") => Base::Transport,
                Some("inner") => Base::Inner,
                _ => return Ok(Expr::Unknown("payload write".into())),
            };
            let off: usize = t.get(10).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            Expr::PayloadWrite {
                base,
                off,
                len,
                sreg,
            }
        }
        Some(k) => {
            let key = t.get(1..3).map(|w| w.join(" ")).unwrap_or_default();
            Expr::Unknown(format!("{k} {key}").trim().to_string())
        }
        None => return Err(bad()),
    };
    Ok(e)
}

fn parse_elem(s: &str) -> Option<Elem> {
    // KEY [- END] [: DATA] [flags N]
    let s = s.trim();
    let (s, flags) = match s.rsplit_once(" flags ") {
        Some((a, f)) => (a.trim(), f.trim().parse::<u32>().ok()?),
        None => (s, 0),
    };
    let (interval_end, catchall) = (flags & 1 != 0, flags & 2 != 0);
    // the catch-all's key is empty: `element  : accept flags 2`
    let s = match s.strip_prefix(": ") {
        Some(d) if catchall => {
            return Some(Elem {
                key: Vec::new(),
                comps: Vec::new(),
                end: None,
                interval_end,
                catchall,
                data: None,
                raw_key: String::new(),
                raw_end: None,
                raw_data: Some(d.trim().to_string()),
            })
        }
        _ => s,
    };
    let (k, d) = match s.split_once(" : ") {
        Some((k, d)) => (k.trim(), Some(d.trim().to_string())),
        None => (s, None),
    };
    let (k, e) = match k.split_once(" - ") {
        Some((a, b)) => (a.trim(), Some(b.trim().to_string())),
        None => (k, None),
    };
    Some(Elem {
        key: Vec::new(),
        comps: Vec::new(),
        end: None,
        interval_end,
        catchall,
        data: None,
        raw_key: k.to_string(),
        raw_end: e,
        raw_data: d,
    })
}

/// Every block of a `.t.payload*` file.
pub fn parse_file(src: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = src.lines().peekable();
    while let Some(l) = lines.next() {
        let Some(rule) = l.strip_prefix("# ") else {
            continue;
        };
        let mut b = Block {
            rule: rule.trim().to_string(),
            family: String::new(),
            table: String::new(),
            chain: String::new(),
            sets: Vec::new(),
            exprs: Vec::new(),
            error: None,
            objs: BTreeMap::new(),
        };
        let mut raw: Vec<Vec<String>> = Vec::new();
        let mut filling: Option<usize> = None;
        while let Some(&l) = lines.peek() {
            if l.trim().is_empty() || l.starts_with("# ") {
                break;
            }
            lines.next();
            if l.trim_start().starts_with("element ") {
                // some blocks print a map's elements without its declaration (`fib daddr
                // check vmap { ... }`): an anonymous map (a set without data) of no flags
                let si = match filling {
                    Some(si) => si,
                    None if b.sets.is_empty() && b.exprs.is_empty() => {
                        let map = l.contains(" : ");
                        b.sets.push(Set {
                            name: if map { "__map%d" } else { "__set%d" }.into(),
                            flags: 0,
                            elems: Vec::new(),
                            catchall: None,
                            named: None,
                        });
                        filling = Some(0);
                        0
                    }
                    None => {
                        b.error = Some(format!("elements without a set: {l}"));
                        continue;
                    }
                };
                for e in l.split("element ").skip(1) {
                    match parse_elem(e) {
                        Some(e) if e.catchall => b.sets[si].catchall = Some(e),
                        Some(e) => b.sets[si].elems.push(e),
                        None => b.error = Some(format!("cannot read element {e}")),
                    }
                }
            } else if let Some(x) = l.trim().strip_prefix('[') {
                let x = x.trim().trim_end_matches(']').trim();
                match parse_expr(x, &mut raw) {
                    Ok(e) => b.exprs.push(e),
                    Err(m) => b.error = Some(m),
                }
            } else {
                let w: Vec<&str> = l.split_whitespace().collect();
                if w.len() >= 3 && w[0].starts_with("__") {
                    // a set: `NAME TABLE FLAGS [size N]` then `NAME TABLE 0` before elements
                    let name = w[0].to_string();
                    let flags = u32::from_str_radix(w[2], 16).unwrap_or(0);
                    match b.sets.iter().rposition(|s| s.name == name) {
                        Some(i)
                            if filling != Some(i) && b.sets[i].elems.is_empty() && w[2] == "0" =>
                        {
                            filling = Some(i)
                        }
                        _ => {
                            b.sets.push(Set {
                                name,
                                flags,
                                elems: Vec::new(),
                                catchall: None,
                                named: None,
                            });
                            filling = None;
                        }
                    }
                } else if !w.is_empty() && b.family.is_empty() {
                    // `FAMILY TABLE CHAIN` (some files give the family alone)
                    b.family = w[0].to_string();
                    b.table = w.get(1).unwrap_or(&"").to_string();
                    b.chain = w.get(2).unwrap_or(&"").to_string();
                } else {
                    b.error = Some(format!("cannot read `{l}`"));
                }
            }
        }
        if b.error.is_none() {
            if let Err(m) = resolve(&mut b, raw) {
                b.error = Some(m);
            }
        }
        // an object map's kind, which the block does not print: the rule's statement says
        let kind = super::objects::map_kind(&b.rule);
        for e in &mut b.exprs {
            if let Expr::Lookup {
                objref: Some(k), ..
            } = e
            {
                *k = kind;
            }
        }
        // a quota or a limit object: its declaration is in the table, not here
        if b.error.is_none() && super::objects::needs_declarations(&b) {
            b.error = Some(super::objects::UNDECLARED.into());
        }
        out.push(b);
    }
    out
}

/// Whether a `meta` key's data is in host byte order.
fn meta_host(key: &str) -> bool {
    !matches!(
        key,
        "protocol"
            | "iifname"
            | "oifname"
            | "sdifname"
            | "iifkind"
            | "oifkind"
            | "bri_iifname"
            | "bri_oifname"
            | "ibrhwaddr"
    )
}

/// Whether a `ct` key's data is in host byte order.
fn ct_host(key: &str) -> bool {
    let k = key.split_whitespace().next().unwrap_or("");
    !matches!(
        k,
        "saddr"
            | "daddr"
            | "src"
            | "dst"
            | "proto-src"
            | "proto-dst"
            | "proto_src"
            | "proto_dst"
            | "src_ip"
            | "dst_ip"
            | "src_ip6"
            | "dst_ip6"
            | "label"
            | "helper"
            | "ip"
            | "ip6"
    )
}

/// Convert the raw constants of a block into register bytes, following which register words
/// hold host-order data, and attach lookups to their sets.
fn resolve(b: &mut Block, raw: Vec<Vec<String>>) -> Result<(), String> {
    // the byte order of data an immediate or a map gives: that of the statement it feeds
    let sink_host: Vec<bool> = (0..b.exprs.len())
        .map(|i| match &b.exprs[i] {
            Expr::Immediate { dreg, .. }
            | Expr::Lookup {
                dreg: Some(dreg), ..
            } => consumer_host(&b.exprs[i + 1..], *dreg),
            _ => false,
        })
        .collect();
    let mut host = [false; WORDS];
    let mut len = [0usize; WORDS]; // bytes of data that starts at a word
    let mut raw = raw.into_iter();
    let mut next = || {
        raw.next()
            .ok_or_else(|| "constants out of step".to_string())
    };
    let mut anon_used: BTreeMap<String, usize> = BTreeMap::new();
    let set_host =
        |host: &mut [bool; WORDS], len: &mut [usize; WORDS], r: usize, n: usize, h: bool| {
            for x in host.iter_mut().take((r + n.div_ceil(4)).min(WORDS)).skip(r) {
                *x = h;
            }
            if r < WORDS {
                len[r] = n;
            }
        };
    let conv = |ws: &[String], h: bool| -> Result<Vec<u8>, String> {
        let v: Vec<&str> = ws.iter().map(String::as_str).collect();
        data_bytes(&v, h).ok_or_else(|| format!("bad data {ws:?}"))
    };
    // host-order data of more than two words: printed how is not known, left out
    let check_words = |ws: &[String], h: bool| -> Result<(), String> {
        if h && ws.len() > 2 {
            Err("unknown: host-order data of several words".into())
        } else {
            Ok(())
        }
    };
    let sets = &mut b.sets;
    for (i, e) in b.exprs.iter_mut().enumerate() {
        match e {
            Expr::Payload { len: n, dreg, .. } => set_host(&mut host, &mut len, *dreg, *n, false),
            Expr::Meta { key, dreg } => {
                let n = match key.as_str() {
                    "l4proto" | "nfproto" | "pkttype" => 1,
                    "protocol" | "iiftype" | "oiftype" => 2,
                    "iifname" | "oifname" | "sdifname" | "iifkind" | "oifkind" => 16,
                    "time" => 8,
                    _ => 4,
                };
                set_host(&mut host, &mut len, *dreg, n, meta_host(key))
            }
            Expr::Ct { key, dreg } => set_host(&mut host, &mut len, *dreg, 4, ct_host(key)),
            // the inner packet's bytes, its protocol (network order), its l4 protocol
            Expr::Inner { load, dreg, .. } => {
                let n = match load {
                    InnerLoad::Payload { len, .. } => *len,
                    InnerLoad::Meta(k) if k == "protocol" => 2,
                    InnerLoad::Meta(_) => 1,
                };
                set_host(&mut host, &mut len, *dreg, n, false)
            }
            Expr::Exthdr {
                len: n,
                dreg,
                present,
                ..
            } => set_host(
                &mut host,
                &mut len,
                *dreg,
                if *present { 1 } else { *n },
                false,
            ),
            Expr::Numgen { dreg, .. } => set_host(&mut host, &mut len, *dreg, 4, true),
            // an index or a type: a host-order u32; a name: 16 bytes; present: one byte
            Expr::Fib {
                result,
                present,
                dreg,
                ..
            } => {
                let (n, h) = match (result.as_str(), *present) {
                    (_, true) => (1, false),
                    ("oifname", _) => (16, false),
                    _ => (4, true),
                };
                set_host(&mut host, &mut len, *dreg, n, h)
            }
            Expr::Bitwise {
                dreg,
                sreg,
                mask,
                xor,
            } => {
                let h = host[*sreg];
                let (m, x) = (next()?, next()?);
                check_words(&m, h)?;
                *mask = conv(&m, h)?;
                *xor = conv(&x, h)?;
                set_host(&mut host, &mut len, *dreg, mask.len(), h);
            }
            Expr::Shift {
                dreg, sreg, len: l, ..
            } => {
                // a shift works on host-order words: what follows is printed as values
                *l = len[*sreg].max(4);
                set_host(&mut host, &mut len, *dreg, *l, true);
            }
            Expr::Byteorder {
                dreg, sreg, len: n, ..
            } => {
                // hton and ntoh both swap; which one says the order of the result
                let h = !host[*sreg];
                set_host(&mut host, &mut len, *dreg, *n, h);
            }
            Expr::Cmp { sreg, data, .. } => {
                let ws = next()?;
                check_words(&ws, host[*sreg])?;
                *data = conv(&ws, host[*sreg])?
            }
            Expr::Range { sreg, from, to, .. } => {
                let (a, z) = (next()?, next()?);
                check_words(&a, host[*sreg])?;
                *from = conv(&a, host[*sreg])?;
                *to = conv(&z, host[*sreg])?;
            }
            Expr::Lookup {
                sreg,
                set,
                dreg,
                objref,
                ..
            } => {
                let objref = objref.is_some();
                let name = next()?.remove(0);
                // anonymous sets are all `__set%d`: the n-th lookup of one is the n-th declared
                let k = anon_used.entry(name.clone()).or_default();
                let found = sets
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.name == name)
                    .map(|(i, _)| i)
                    .nth(*k);
                let idx = match found {
                    Some(i) => i,
                    None if !name.starts_with("__") => {
                        sets.push(Set {
                            name: name.clone(),
                            flags: 0,
                            elems: Vec::new(),
                            catchall: None,
                            named: Some(host[*sreg]),
                        });
                        sets.len() - 1
                    }
                    None => return Err(format!("unknown: set {name}")),
                };
                *k += 1;
                *set = idx;
                let s = &mut sets[idx];
                let mut data_host = None;
                for el in s.elems.iter_mut().chain(s.catchall.as_mut()) {
                    if !el.catchall {
                        (el.key, el.comps) = key_bytes(&el.raw_key, *sreg, &host)?;
                    }
                    if let Some(e) = &el.raw_end {
                        el.end = Some(key_bytes(e, *sreg, &host)?.0);
                    }
                    if let Some(d) = &el.raw_data {
                        let first = d.split_whitespace().next().unwrap_or("");
                        el.data = Some(if objref {
                            ElemData::Object(d.clone())
                        } else if matches!(
                            first,
                            "accept" | "drop" | "continue" | "return" | "jump" | "goto" | "queue"
                        ) {
                            ElemData::Verdict(d.clone())
                        } else {
                            // map data: its byte order is the statement's; register layout
                            let mut out = Vec::new();
                            for c in d.split(" . ") {
                                let ws: Vec<&str> = c.split_whitespace().collect();
                                if sink_host[i] && ws.len() > 1 {
                                    return Err("unknown: host-order map data".into());
                                }
                                let mut v = data_bytes(&ws, sink_host[i])
                                    .ok_or_else(|| format!("bad map data {d}"))?;
                                while v.len() % 4 != 0 {
                                    v.push(0);
                                }
                                out.extend(v);
                            }
                            data_host.get_or_insert(out.len());
                            ElemData::Bytes(out)
                        });
                    }
                }
                if let (Some(d), Some(n)) = (dreg, data_host) {
                    set_host(&mut host, &mut len, *d, n, sink_host[i]);
                }
            }
            Expr::Immediate { dreg, data } => {
                let ws = next()?;
                check_words(&ws, sink_host[i])?;
                *data = conv(&ws, sink_host[i])?;
                set_host(&mut host, &mut len, *dreg, data.len(), sink_host[i]);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether the first expression of `rest` that reads register `reg` stores it in host order
/// (`meta set mark`, `ct set mark`), following `bitwise` and shifts on the way.
fn consumer_host(rest: &[Expr], reg: usize) -> bool {
    let mut reg = reg;
    for e in rest {
        match e {
            Expr::MetaSet { key, sreg } if *sreg == reg => return meta_host(key),
            Expr::CtSetMark { sreg } if *sreg == reg => return true,
            Expr::Shift { sreg, .. } if *sreg == reg => return true,
            Expr::Bitwise { sreg, dreg, .. } if *sreg == reg => reg = *dreg,
            Expr::Byteorder { sreg, .. } if *sreg == reg => return false,
            Expr::Cmp { sreg, .. }
            | Expr::Range { sreg, .. }
            | Expr::Lookup { sreg, .. }
            | Expr::PayloadWrite { sreg, .. }
                if *sreg == reg =>
            {
                return false
            }
            Expr::Payload { dreg, .. }
            | Expr::Exthdr { dreg, .. }
            | Expr::Meta { dreg, .. }
            | Expr::Ct { dreg, .. }
            | Expr::Numgen { dreg, .. }
            | Expr::Fib { dreg, .. }
            | Expr::Inner { dreg, .. }
            | Expr::Immediate { dreg, .. }
                if *dreg == reg =>
            {
                return false
            }
            _ => {}
        }
    }
    false
}

/// A set key (`c0a80102 . 0050`) in register layout from `sreg` on: each component in the
/// byte order of the register words it lands in, padded to whole words.
fn key_bytes(s: &str, sreg: usize, host: &[bool; WORDS]) -> Result<(Vec<u8>, Vec<usize>), String> {
    let mut out = Vec::new();
    let mut comps = Vec::new();
    let mut w = sreg;
    for c in s.split(" . ") {
        let ws: Vec<&str> = c.split_whitespace().collect();
        let h = host.get(w).copied().unwrap_or(false);
        if h && ws.len() > 1 {
            return Err("unknown: host-order key of several words".into());
        }
        let mut v = data_bytes(&ws, h).ok_or_else(|| format!("bad element {s}"))?;
        while v.len() % 4 != 0 {
            v.push(0);
        }
        w += v.len() / 4;
        comps.push(v.len());
        out.extend(v);
    }
    Ok((out, comps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_block_with_an_anonymous_set() {
        let src = "# tcp dport {22, 23}\n__set%d test-ip4 3\n__set%d test-ip4 0\n\telement 0016\telement 0017\nip test-ip4 input\n  [ meta load l4proto => reg 1 ]\n  [ cmp eq reg 1 0x06 ]\n  [ payload load 2b @ transport header + 2 => reg 1 ]\n  [ lookup reg 1 set __set%d ]\n\n# meta mark 0x4\nip test-ip4 input\n  [ meta load mark => reg 1 ]\n  [ cmp eq reg 1 0x00000004 ]\n";
        let b = parse_file(src);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].error, None);
        assert_eq!(b[0].family, "ip");
        assert_eq!(b[0].sets.len(), 1);
        assert_eq!(b[0].sets[0].elems[1].key, vec![0, 0x17, 0, 0]);
        assert_eq!(
            b[0].exprs[3],
            Expr::Lookup {
                sreg: 4,
                set: 0,
                dreg: None,
                invert: false,
                objref: None,
            }
        );
        // host order: the value 4 is held as 04 00 00 00
        assert_eq!(
            b[1].exprs[1],
            Expr::Cmp {
                op: CmpOp::Eq,
                sreg: 4,
                data: vec![4, 0, 0, 0]
            }
        );
    }
}
