//! Passive OS fingerprinting: what nft's `osf name` / `osf version` reads.
//!
//! nftables' `osf` expression (Linux `nft_osf.c`) asks `nfnetlink_osf` which operating system
//! sent a TCP SYN, judging from the SYN's IP total length, TTL, don't-fragment bit, TCP window
//! and the kinds and order of its TCP options. The kernel knows nothing by itself: userspace
//! loads a p0f v2 / OpenBSD `pf.os` fingerprint file into it with iptables' `nfnl_osf -f FILE`.
//! weir loads the same file into an [`OsfDb`] ([`OsfDb::parse`] reads it the way `nfnl_osf`
//! does, and rejects what `nfnl_osf` or the kernel would refuse) and asks it with
//! [`OsfDb::find`], which decides as `nf_osf_find` does: the first fingerprint, in file order,
//! of the list for the packet's DF bit that matches.
//!
//! When nothing matches, the kernel writes the string `"unknown"` into the register (so
//! `osf name "unknown"` matches); that is the caller's `None`. Packets that are not IPv4, not
//! TCP, or lack the SYN flag never reach `nf_osf_find`: `nft_osf_eval` ends the rule there
//! (NFT_BREAK), and the caller must check those before calling [`OsfDb::find`]. The register
//! holds 16 bytes: the genre (or `genre:version` with `osf version`) cut to 15 bytes and
//! NUL-padded; the cut is the caller's too, as [`OsfMatch`] hands out the whole stored
//! strings (each at most 31 bytes, as `struct nf_osf_user_finger` keeps them).

/// How the packet's TTL is compared with a fingerprint's (nft's `osf ttl loose|skip`; none =
/// true).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OsfTtl {
    /// `NF_OSF_TTL_TRUE`: the packet's TTL must equal the fingerprint's.
    True,
    /// `NF_OSF_TTL_LESS`: the packet's TTL must be at most the fingerprint's.
    Loose,
    /// `NF_OSF_TTL_NOCHECK`: the TTL is not compared.
    Skip,
}

/// `MAXGENRELEN`: genre, version and subtype are kept in 32-byte NUL-terminated arrays.
const MAX_NAME: usize = 32 - 1;
/// `MAX_IPOPTLEN`: the most option bytes a fingerprint (or a TCP header) has.
const MAX_OPT_LEN: usize = 40;
/// nfnl_osf's `MAXOPTSTRLEN`: the option field, plus its appended ',', fits 127 bytes.
const MAX_OPT_STR: usize = 128;
/// fgets(buf, 1024): a line longer than 1023 bytes is read as several.
const LINE_BUF: usize = 1024;
/// The MSS values the kernel tries besides the packet's own (`SMART_MSS_1`, `SMART_MSS_2`).
const SMART_MSS: [u32; 2] = [1460, 1448];

const OPT_EOL: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_MSS: u8 = 2;
const OPT_WSO: u8 = 3;
const OPT_SACKP: u8 = 4;
const OPT_TS: u8 = 8;

/// `enum nf_osf_window_size_options`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WinMode {
    /// The window equals the value; value 0 (`*`, or anything not a digit) matches any.
    Plain,
    /// The window is value × MSS (the packet's MSS option, 1460 or 1448).
    Mss,
    /// The window is value × (MSS + 40).
    Mtu,
    /// The window is a multiple of the value.
    Modulo,
}

/// `struct nf_osf_wc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Wildcard {
    mode: WinMode,
    val: u32,
}

/// `struct nf_osf_opt`. The kernel compares only `kind` with the packet's byte at that place
/// and steps `len` bytes on; `wc` is parsed (and keeps otherwise-equal fingerprints apart)
/// but never compared with the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FingerOpt {
    kind: u8,
    len: u8,
    wc: Wildcard,
}

/// `struct nf_osf_user_finger`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Finger {
    wss: Wildcard,
    ttl: u8,
    df: u8,
    ss: u16,
    opts: Vec<FingerOpt>,
    genre: String,
    version: String,
    subtype: String,
}

/// A loaded fingerprint database, kept as the kernel keeps it: two lists indexed by the
/// don't-fragment bit (`nf_osf_fingers[2]`), each in file order, without exact duplicates.
#[derive(Clone, Debug, Default)]
pub struct OsfDb {
    lists: [Vec<Finger>; 2],
}

/// The fingerprint a SYN matched: `genre` and `version` as loaded (at most 31 bytes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OsfMatch<'a> {
    pub genre: &'a str,
    pub version: &'a str,
}

impl OsfDb {
    /// Reads a `pf.os` file as `nfnl_osf -f` loads it: `#` comments and empty lines skipped,
    /// each other line `wsize:ttl:df:syn_size:options:genre:version:subtype:description`.
    ///
    /// Quirks kept from nfnl_osf: a line must have exactly 8 `:`; the last byte of every line
    /// is dropped (the newline, or the last character of a final line without one); a line of
    /// only blanks is an error; numbers are read as `strtoul` reads them and truncated to the
    /// field's width; a field that is not a number reads as 0. nfnl_osf stops at the first
    /// line it or the kernel refuses (the lines before it stay loaded in the kernel); here
    /// that is the error, naming the line, and nothing is loaded.
    pub fn parse(text: &str) -> Result<OsfDb, String> {
        let mut db = OsfDb::default();
        for (line_no, chunk) in fgets_chunks(text.as_bytes()) {
            if matches!(chunk.first(), Some(b'#' | b'\n' | b'\r')) {
                continue;
            }
            let strlen = chunk.iter().position(|&b| b == 0).unwrap_or(chunk.len());
            if strlen <= 1 {
                continue;
            }
            let line = &chunk[..strlen - 1];
            let finger = parse_line(line).map_err(|e| format!("line {line_no}: {e}"))?;
            let list = &mut db.lists[usize::from(finger.df != 0)];
            if !list.contains(&finger) {
                list.push(finger);
            }
        }
        Ok(db)
    }

    /// How many fingerprints are loaded (both lists).
    pub fn len(&self) -> usize {
        self.lists[0].len() + self.lists[1].len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `ip`: the IPv4 packet from its header on (the TCP header follows at ihl*4; options read
    /// from it). `local_source`: whether the source address is on one of the input device's
    /// networks (nf_osf_ttl's loose check). None: no fingerprint matches (nft then gives
    /// "unknown"); the caller checks TCP and SYN first, as nft_osf_eval does.
    ///
    /// `local_source` changes nothing, exactly as in the kernel: older `nf_osf_ttl` consulted
    /// the device's addresses only once `ttl <= fingerprint ttl` had failed, and then asked
    /// for `ttl == fingerprint ttl`, which cannot hold; newer kernels dropped that branch.
    ///
    /// The packet is read as the kernel sees it at an IPv4 hook: bytes past the IP total
    /// length are ignored, and a packet the IP layer would have dropped (not version 4, IHL
    /// below 5, total length beyond the data or below the header) matches nothing, as does
    /// one whose TCP header or options are cut short, or that is not TCP or has no SYN flag
    /// (any SYN: a SYN/ACK is fingerprinted too). The fragment offset is not looked at.
    pub fn find(&self, ip: &[u8], ttl: OsfTtl, local_source: bool) -> Option<OsfMatch<'_>> {
        let _ = local_source;
        let syn = Syn::read(ip)?;
        self.lists[usize::from(syn.df)]
            .iter()
            .find(|f| f.matches(&syn, ttl))
            .map(|f| OsfMatch {
                genre: &f.genre,
                version: &f.version,
            })
    }
}

/// What `nf_osf_hdr_ctx_init` takes from the SYN.
struct Syn<'p> {
    df: bool,
    ttl: u8,
    totlen: u16,
    window: u16,
    opts: &'p [u8],
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

impl<'p> Syn<'p> {
    fn read(ip: &'p [u8]) -> Option<Syn<'p>> {
        let first = *ip.first()?;
        if first >> 4 != 4 {
            return None;
        }
        let ihl = usize::from(first & 0x0f) * 4;
        let totlen = be16(ip, 2)?;
        if ihl < 20 || usize::from(totlen) < ihl || usize::from(totlen) > ip.len() {
            return None;
        }
        let pkt = &ip[..usize::from(totlen)];
        if pkt[9] != 6 {
            return None;
        }
        let tcp = pkt.get(ihl..ihl + 20)?;
        if tcp[13] & 0x02 == 0 {
            return None;
        }
        let doff = usize::from(tcp[12] >> 4) * 4;
        // A data offset below 5 words reads as "no options", as in the kernel.
        let opts = if doff > 20 {
            pkt.get(ihl + 20..ihl + doff)?
        } else {
            &[]
        };
        Some(Syn {
            df: be16(pkt, 6)? & 0x4000 != 0,
            ttl: pkt[8],
            totlen,
            window: be16(tcp, 14)?,
            opts,
        })
    }
}

impl Finger {
    /// `nf_osf_match_one`.
    fn matches(&self, syn: &Syn<'_>, ttl: OsfTtl) -> bool {
        if syn.totlen != self.ss {
            return false;
        }
        let ttl_ok = match ttl {
            OsfTtl::True => syn.ttl == self.ttl,
            OsfTtl::Loose => syn.ttl <= self.ttl,
            OsfTtl::Skip => true,
        };
        if !ttl_ok {
            return false;
        }

        let want: usize = self.opts.iter().map(|o| usize::from(o.len)).sum();
        if want > MAX_OPT_LEN || syn.opts.len() != want {
            return false;
        }
        // Each option's kind must sit where the fingerprint's option lengths put it; the
        // packet's own length bytes are not read. The last MSS option seen gives the MSS.
        let mut at = 0;
        let mut mss: u16 = 0;
        for o in &self.opts {
            if syn.opts.get(at) != Some(&o.kind) {
                return false;
            }
            if o.kind == OPT_MSS {
                match be16(syn.opts, at + 2) {
                    Some(m) => mss = m,
                    None => return false,
                }
            }
            at += usize::from(o.len);
        }

        // The kernel multiplies in 32 bits, wrapping.
        let window = u32::from(syn.window);
        let val = self.wss.val;
        match self.wss.mode {
            WinMode::Plain => val == 0 || window == val,
            WinMode::Mss => std::iter::once(u32::from(mss))
                .chain(SMART_MSS)
                .any(|m| window == val.wrapping_mul(m)),
            WinMode::Mtu => std::iter::once(u32::from(mss))
                .chain(SMART_MSS)
                .any(|m| window == val.wrapping_mul(m + 40)),
            WinMode::Modulo => val != 0 && window % val == 0,
        }
    }
}

/// The file as `fgets(buf, 1024, f)` hands it out: pieces ending at a newline (kept) or
/// after 1023 bytes, each with the 1-based number of the line it comes from.
fn fgets_chunks(text: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut rest = text;
    let mut line_no = 1;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let max = rest.len().min(LINE_BUF - 1);
        let end = rest[..max]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(max, |p| p + 1);
        let (chunk, tail) = rest.split_at(end);
        rest = tail;
        let no = line_no;
        if chunk.ends_with(b"\n") {
            line_no += 1;
        }
        Some((no, chunk))
    })
}

/// C's `isspace` in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// C's `strtoul(s, NULL, 10)` on a 64-bit target: leading blanks, an optional sign (a minus
/// negates modulo 2^64), digits up to the first non-digit; no digits is 0; overflow saturates.
/// Callers truncate the result to their field's width, as the C assignments do.
fn strtoul(s: &[u8]) -> u64 {
    let mut i = 0;
    while s.get(i).is_some_and(|&b| is_space(b)) {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut v: u64 = 0;
    let mut overflow = false;
    while let Some(&d) = s.get(i).filter(|b| b.is_ascii_digit()) {
        match v
            .checked_mul(10)
            .and_then(|x| x.checked_add(u64::from(d - b'0')))
        {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    if overflow {
        u64::MAX
    } else if negative {
        v.wrapping_neg()
    } else {
        v
    }
}

/// `snprintf(dst, 32, "%s", src)`: at most 31 bytes (cut back to a character boundary, the
/// one place this differs from the kernel's byte arrays, and only for non-ASCII names).
fn name(src: &[u8]) -> String {
    let cut = &src[..src.len().min(MAX_NAME)];
    let valid = match std::str::from_utf8(cut) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&cut[..e.valid_up_to()]).unwrap_or_default(),
    };
    valid.to_owned()
}

/// `osf_load_line` and the checks `nfnl_osf_add_callback` makes before it keeps one.
fn parse_line(line: &[u8]) -> Result<Finger, String> {
    let colons = line.iter().filter(|&&b| b == b':').count();
    if colons != 8 {
        return Err(format!("{colons} ':' separators, must be 8"));
    }
    // Each field ends at the next ':'; blanks after a ':' are skipped (not those of the first
    // field, nor trailing ones). What follows the eighth ':' is the description, unused.
    let mut fields: [&[u8]; 8] = [&[]; 8];
    let mut rest = line;
    for field in &mut fields {
        let colon = rest.iter().position(|&b| b == b':').unwrap_or(rest.len());
        *field = &rest[..colon];
        rest = rest.get(colon + 1..).unwrap_or_default();
        let blanks = rest.iter().take_while(|&&b| is_space(b)).count();
        rest = &rest[blanks..];
    }
    let [wsize, ttl, df, ss, options, genre, version, subtype] = fields;

    let wss = parse_wsize(wsize);
    if wss.mode == WinMode::Modulo && wss.val == 0 {
        return Err("window size modulo 0".to_owned());
    }

    let opts = parse_options(options);
    if opts.len() > MAX_OPT_LEN {
        return Err(format!("{} options, at most {MAX_OPT_LEN}", opts.len()));
    }
    let total: usize = opts.iter().map(|o| usize::from(o.len)).sum();
    if total > MAX_OPT_LEN {
        return Err(format!("options of {total} bytes, at most {MAX_OPT_LEN}"));
    }

    let genre = match genre.first() {
        Some(b'@' | b'*') => &genre[1..],
        _ => genre,
    };
    Ok(Finger {
        wss,
        ttl: strtoul(ttl) as u8,
        df: strtoul(df) as u8,
        ss: strtoul(ss) as u16,
        opts,
        genre: name(genre),
        version: name(version),
        subtype: name(subtype),
    })
}

/// The window field: `S[%]N` / `S*` (MSS multiple), `T[%]N` / `T*` (MTU multiple), `%N`
/// (modulo), digits (plain), anything else (`*` included) plain 0, which matches any window.
fn parse_wsize(f: &[u8]) -> Wildcard {
    let plain_any = Wildcard {
        mode: WinMode::Plain,
        val: 0,
    };
    let multiple = |mode| {
        let val = match f.get(1) {
            Some(b'%') => strtoul(&f[2..]) as u32,
            Some(b'*') => 0,
            _ => strtoul(f.get(1..).unwrap_or_default()) as u32,
        };
        Wildcard { mode, val }
    };
    match f.first() {
        Some(b'S') => multiple(WinMode::Mss),
        Some(b'T') => multiple(WinMode::Mtu),
        Some(b'%') => Wildcard {
            mode: WinMode::Modulo,
            val: strtoul(&f[1..]) as u32,
        },
        Some(d) if d.is_ascii_digit() => Wildcard {
            mode: WinMode::Plain,
            val: strtoul(f) as u32,
        },
        _ => plain_any,
    }
}

/// `xt_osf_parse_opt` on the option field with a ',' appended (the whole cut to 127 bytes).
/// An option is known by its first character only: `N` NOP, `S` SACK permitted, `T` (also
/// `T0`) timestamp, `E` end of list, `M` MSS (`M%N` keeps a modulo), `W` window scale (`W%N`,
/// `WSN`, `WTN`); anything else (`.`, `*`, empty, lower case) adds no option.
fn parse_options(field: &[u8]) -> Vec<FingerOpt> {
    // The C works in place on a NUL-terminated buffer; so does this.
    let mut buf = [0u8; MAX_OPT_STR];
    let text = field.iter().chain(b",").take(MAX_OPT_STR - 1);
    for (slot, &b) in buf.iter_mut().zip(text) {
        *slot = b;
    }
    // Finds the ',' from `from`, NULs it and returns the last blank after it (or the ',').
    let next_delim = |buf: &mut [u8; MAX_OPT_STR], from: usize| -> Option<usize> {
        let rel = buf[from..]
            .iter()
            .take_while(|&&b| b != 0)
            .position(|&b| b == b',')?;
        let mut t = from + rel;
        buf[t] = 0;
        while buf.get(t + 1).is_some_and(|&b| is_space(b)) {
            t += 1;
        }
        Some(t)
    };
    let c_str = |buf: &[u8; MAX_OPT_STR], from: usize| -> u64 {
        let s = buf.get(from..).unwrap_or_default();
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        strtoul(&s[..end])
    };

    let mut opts = Vec::new();
    let mut i = 0;
    while i < MAX_OPT_STR && buf[i] != 0 {
        let mut wc = Wildcard {
            mode: WinMode::Plain,
            val: 0,
        };
        let kind = match buf[i] {
            b'N' => Some(OPT_NOP),
            b'S' => Some(OPT_SACKP),
            b'T' => Some(OPT_TS),
            b'E' => Some(OPT_EOL),
            b'W' => Some(OPT_WSO),
            b'M' => Some(OPT_MSS),
            _ => None,
        };
        let delim = next_delim(&mut buf, i);
        if let (Some(t), Some(k @ (OPT_WSO | OPT_MSS))) = (delim, kind) {
            wc.mode = match buf.get(i + 1) {
                Some(b'%') => WinMode::Modulo,
                Some(b'S') if k == OPT_WSO => WinMode::Mss,
                Some(b'T') if k == OPT_WSO => WinMode::Mtu,
                _ => WinMode::Plain,
            };
            buf[t] = 0;
            let skip = if wc.mode == WinMode::Plain { 1 } else { 2 };
            wc.val = c_str(&buf, i + skip) as u32;
        }
        if let Some(kind) = kind {
            let len = match kind {
                OPT_MSS => 4,
                OPT_WSO => 3,
                OPT_SACKP => 2,
                OPT_TS => 10,
                _ => 1,
            };
            opts.push(FingerOpt { kind, len, wc });
        }
        match delim {
            Some(t) => i = t + 1,
            // No ',' left (the field was cut at 127 bytes): this was the last option.
            None => break,
        }
    }
    opts
}

/// nft_osf_eval: the value of `osf [ttl ...] name|version` for the packet (a string as
/// [`weir_wire::field::ifname_value`] encodes it): None (the rule stops) unless the packet is
/// an IPv4 TCP SYN with its TCP header (the kernel reads an IPv6 packet as if it were IPv4;
/// weir stops the rule); "unknown" when no fingerprint matches or none is loaded; else the
/// genre, or `genre:version`, cut to 15 bytes.
pub(crate) fn key(
    db: Option<&OsfDb>,
    frame: &[u8],
    pm: &weir_wire::PacketMeta,
    ttl: u8,
    version: bool,
) -> Option<u128> {
    use weir_wire::{Frag, L3};
    if pm.l3 != L3::Ipv4 || !pm.has_l4 || pm.l4proto != 6 || pm.frag == Frag::Later {
        return None;
    }
    let l3 = pm.l3_off as usize;
    let l4 = pm.l4_off as usize;
    let flags = *frame.get(l4 + 13)?;
    frame.get(l4..l4 + 20)?;
    if flags & 0x02 == 0 {
        return None;
    }
    let mode = match ttl {
        0 => OsfTtl::True,
        1 => OsfTtl::Loose,
        _ => OsfTtl::Skip,
    };
    let found = db.and_then(|db| db.find(frame.get(l3..)?, mode, false));
    // the name in the register's 16 bytes, cut to 15 (no allocation per SYN)
    let parts: [&[u8]; 3] = match found {
        None => [b"unknown", b"", b""],
        Some(m) if version => [m.genre.as_bytes(), b":", m.version.as_bytes()],
        Some(m) => [m.genre.as_bytes(), b"", b""],
    };
    let mut buf = [0u8; 16];
    for (d, b) in buf[..15]
        .iter_mut()
        .zip(parts.iter().flat_map(|p| p.iter()))
    {
        *d = *b;
    }
    Some(u128::from_be_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtoul_as_c() {
        assert_eq!(strtoul(b"  42xyz"), 42);
        assert_eq!(strtoul(b"*"), 0);
        assert_eq!(strtoul(b""), 0);
        assert_eq!(strtoul(b"-1") as u8, 255);
        assert_eq!(strtoul(b"+7"), 7);
        assert_eq!(strtoul(b"99999999999999999999999"), u64::MAX);
        assert_eq!(strtoul(b"256") as u8, 0);
    }

    #[test]
    fn wsize_forms() {
        let w = |s: &str| parse_wsize(s.as_bytes());
        assert_eq!(
            w("S4"),
            Wildcard {
                mode: WinMode::Mss,
                val: 4
            }
        );
        assert_eq!(
            w("S%4"),
            Wildcard {
                mode: WinMode::Mss,
                val: 4
            }
        );
        assert_eq!(
            w("S*"),
            Wildcard {
                mode: WinMode::Mss,
                val: 0
            }
        );
        assert_eq!(
            w("T2"),
            Wildcard {
                mode: WinMode::Mtu,
                val: 2
            }
        );
        assert_eq!(
            w("%8192"),
            Wildcard {
                mode: WinMode::Modulo,
                val: 8192
            }
        );
        assert_eq!(
            w("65535"),
            Wildcard {
                mode: WinMode::Plain,
                val: 65535
            }
        );
        assert_eq!(
            w("*"),
            Wildcard {
                mode: WinMode::Plain,
                val: 0
            }
        );
        assert_eq!(
            w(" 5"),
            Wildcard {
                mode: WinMode::Plain,
                val: 0
            }
        );
    }

    #[test]
    fn option_letters() {
        let kinds = |s: &str| -> Vec<(u8, u8)> {
            parse_options(s.as_bytes())
                .iter()
                .map(|o| (o.kind, o.len))
                .collect()
        };
        assert_eq!(
            kinds("M*,S,T,N,W7"),
            vec![(2, 4), (4, 2), (8, 10), (1, 1), (3, 3)]
        );
        assert_eq!(kinds("T0,E"), vec![(8, 10), (0, 1)]);
        assert_eq!(kinds("."), vec![]);
        assert_eq!(kinds("*"), vec![]);
        assert_eq!(kinds("N,,x, S"), vec![(1, 1), (4, 2)]);
        let o = parse_options(b"M%512,W%2,WS3,WT1,W*,M1460");
        let wc: Vec<_> = o.iter().map(|o| (o.wc.mode, o.wc.val)).collect();
        assert_eq!(
            wc,
            vec![
                (WinMode::Modulo, 512),
                (WinMode::Modulo, 2),
                (WinMode::Mss, 3),
                (WinMode::Mtu, 1),
                (WinMode::Plain, 0),
                (WinMode::Plain, 1460),
            ]
        );
        // 64 NOPs fit the 127-byte buffer: more than the kernel's 40.
        assert_eq!(parse_options("N,".repeat(64).as_bytes()).len(), 64);
    }

    #[test]
    fn long_lines_split_as_fgets() {
        let long = "x".repeat(2000);
        let text = format!("a\n{long}\nb");
        let chunks: Vec<_> = fgets_chunks(text.as_bytes())
            .map(|(n, c)| (n, c.len()))
            .collect();
        assert_eq!(chunks, vec![(1, 2), (2, 1023), (2, 978), (3, 1)]);
    }
}
