//! Reader for ClassBench rule sets and header traces (Taylor and Turner, INFOCOM 2005).
//!
//! Rule lines look like
//! `@176.19.181.33/32<TAB>90.145.23.162/32<TAB>0 : 65535<TAB>1550 : 1550<TAB>0x06/0xFF<TAB>0x0000/0x0200`;
//! line order is priority (the first line wins). Trace lines are tab- (or space-) separated
//! decimals: `src dst sport dport proto [flags [filter]]`.
//!
//! As in published classifier results, the TCP-flags column is parsed (when present) but ignored:
//! rules and headers are classified on the five fields only. [`CbRule::to_entry`] maps a rule to a
//! five-dimensional [`Entry`] with the engine's IPv4 key layout
//! `[saddr(32), daddr(32), sport(17), dport(17), proto(8)]` ([`CB_WIDTHS`]); a full port range
//! `0 : 65535` becomes the engine's port wildcard `[0, 0x1FFFF]`.
//!
//! The parsers never panic: malformed input gives an `Err` naming the 1-based line and the
//! problem.

use crate::Entry;

/// Dimension widths of the key made by [`CbHeader::key`] and [`CbRule::to_entry`].
pub const CB_WIDTHS: [u8; 5] = [32, 32, 17, 17, 8];

/// One ClassBench rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbRule {
    /// Source prefix (address, length); host bits beyond the length are cleared.
    pub src: (u32, u8),
    /// Destination prefix (address, length); host bits beyond the length are cleared.
    pub dst: (u32, u8),
    /// Inclusive source port range.
    pub sport: (u16, u16),
    /// Inclusive destination port range.
    pub dport: (u16, u16),
    /// Protocol (value, mask); mask is 0xFF (exact) or 0x00 (any).
    pub proto: (u8, u8),
    /// 1-based line number in the rules text.
    pub line: usize,
}

/// One trace header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbHeader {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Protocol.
    pub proto: u8,
    /// The trace's "filter" column: the 0-based rule the header was generated from (NOT the
    /// answer: an earlier rule may match too). `u32::MAX` when the column is absent.
    pub filter: u32,
}

fn prefix_range(addr: u32, len: u8) -> (u64, u64) {
    let mask: u32 = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    };
    (u64::from(addr & mask), u64::from(addr | !mask))
}

impl CbRule {
    /// The classifier entry for this rule (flags ignored).
    pub fn to_entry(&self, prio: u32, rule: u32) -> Entry<5> {
        let port = |(lo, hi): (u16, u16)| -> (u64, u64) {
            if lo == 0 && hi == u16::MAX {
                (0, 0x1_FFFF)
            } else {
                (u64::from(lo), u64::from(hi))
            }
        };
        let proto = if self.proto.1 == 0 {
            (0, 255)
        } else {
            (u64::from(self.proto.0), u64::from(self.proto.0))
        };
        Entry {
            prio,
            rule,
            ranges: [
                prefix_range(self.src.0, self.src.1),
                prefix_range(self.dst.0, self.dst.1),
                port(self.sport),
                port(self.dport),
                proto,
            ],
            residual: false,
        }
    }
}

impl CbHeader {
    /// The classifier key `[src, dst, sport, dport, proto]` (widths [`CB_WIDTHS`]).
    pub fn key(&self) -> [u64; 5] {
        [
            u64::from(self.src),
            u64::from(self.dst),
            u64::from(self.sport),
            u64::from(self.dport),
            u64::from(self.proto),
        ]
    }
}

fn parse_prefix(s: &str) -> Result<(u32, u8), String> {
    let (ip, len) = s
        .split_once('/')
        .ok_or_else(|| format!("expected <ip>/<len>, found {s:?}"))?;
    let addr: std::net::Ipv4Addr = ip
        .trim()
        .parse()
        .map_err(|_| format!("bad IPv4 address {ip:?}"))?;
    let len: u8 = len
        .trim()
        .parse()
        .ok()
        .filter(|l| *l <= 32)
        .ok_or_else(|| format!("bad prefix length {len:?} (0..=32)"))?;
    let (lo, _) = prefix_range(u32::from(addr), len);
    Ok((lo as u32, len))
}

fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let (lo, hi) = s
        .split_once(':')
        .ok_or_else(|| format!("expected <lo> : <hi>, found {s:?}"))?;
    let p = |x: &str| -> Result<u16, String> {
        x.trim()
            .parse::<u16>()
            .map_err(|_| format!("bad port {:?} (0..=65535)", x.trim()))
    };
    let (lo, hi) = (p(lo)?, p(hi)?);
    if lo > hi {
        return Err(format!("empty port range {lo} : {hi}"));
    }
    Ok((lo, hi))
}

fn parse_hex(s: &str, max: u32) -> Result<u32, String> {
    let t = s.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .ok_or_else(|| format!("expected a 0x-prefixed hex number, found {t:?}"))?;
    u32::from_str_radix(digits, 16)
        .ok()
        .filter(|v| *v <= max)
        .ok_or_else(|| format!("bad hex number {t:?} (max {max:#x})"))
}

fn parse_value_mask(s: &str, max: u32) -> Result<(u32, u32), String> {
    let (v, m) = s
        .split_once('/')
        .ok_or_else(|| format!("expected <value>/<mask>, found {s:?}"))?;
    Ok((parse_hex(v, max)?, parse_hex(m, max)?))
}

fn parse_rule_line(line: &str, lineno: usize) -> Result<CbRule, String> {
    let body = line
        .strip_prefix('@')
        .ok_or_else(|| "a rule must start with '@'".to_string())?;
    let fields: Vec<&str> = body
        .split('\t')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .collect();
    if fields.len() < 5 || fields.len() > 6 {
        return Err(format!(
            "expected 5 or 6 tab-separated fields (src, dst, sport, dport, proto[, flags]), found {}",
            fields.len()
        ));
    }
    let src = parse_prefix(fields[0]).map_err(|e| format!("source: {e}"))?;
    let dst = parse_prefix(fields[1]).map_err(|e| format!("destination: {e}"))?;
    let sport = parse_port_range(fields[2]).map_err(|e| format!("source port: {e}"))?;
    let dport = parse_port_range(fields[3]).map_err(|e| format!("destination port: {e}"))?;
    let (pv, pm) = parse_value_mask(fields[4], 0xFF).map_err(|e| format!("protocol: {e}"))?;
    if pm != 0 && pm != 0xFF {
        return Err(format!(
            "protocol: mask must be 0xFF or 0x00, found {pm:#04x}"
        ));
    }
    if let Some(flags) = fields.get(5) {
        parse_value_mask(flags, 0xFFFF).map_err(|e| format!("flags: {e}"))?;
    }
    Ok(CbRule {
        src,
        dst,
        sport,
        dport,
        proto: (if pm == 0 { 0 } else { pv as u8 }, pm as u8),
        line: lineno,
    })
}

/// Parses a ClassBench rule set. Blank lines are skipped. The error names the 1-based line.
pub fn parse_rules(text: &str) -> Result<Vec<CbRule>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        out.push(parse_rule_line(trimmed, i + 1).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(out)
}

fn parse_header_line(line: &str) -> Result<CbHeader, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 5 || fields.len() > 7 {
        return Err(format!(
            "expected 5 to 7 fields (src dst sport dport proto [flags [filter]]), found {}",
            fields.len()
        ));
    }
    let num = |i: usize, what: &str, max: u64| -> Result<u64, String> {
        fields[i]
            .parse::<u64>()
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| format!("bad {what} {:?} (0..={max})", fields[i]))
    };
    let src = num(0, "source address", u32::MAX.into())? as u32;
    let dst = num(1, "destination address", u32::MAX.into())? as u32;
    let sport = num(2, "source port", u16::MAX.into())? as u16;
    let dport = num(3, "destination port", u16::MAX.into())? as u16;
    let proto = num(4, "protocol", u8::MAX.into())? as u8;
    if fields.len() > 5 {
        num(5, "flags", u32::MAX.into())?;
    }
    let filter = if fields.len() > 6 {
        num(6, "filter number", u32::MAX.into())? as u32
    } else {
        u32::MAX
    };
    Ok(CbHeader {
        src,
        dst,
        sport,
        dport,
        proto,
        filter,
    })
}

/// Parses a ClassBench header trace. Blank lines are skipped. The error names the 1-based line.
pub fn parse_trace(text: &str) -> Result<Vec<CbHeader>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        out.push(parse_header_line(trimmed).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(out)
}

/// Rules to entries the way the benchmarks use them: rule `i` (0-based file order) gets
/// `prio = i` and `rule = i`.
pub fn to_entries(rules: &[CbRule]) -> Vec<Entry<5>> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| r.to_entry(i as u32, i as u32))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rule() {
        let r = parse_rules(
            "@176.19.181.33/32\t90.145.23.162/24\t0 : 65535\t1550 : 1550\t0x06/0xFF\t0x0000/0x0200\t\n",
        )
        .unwrap();
        assert_eq!(r.len(), 1);
        let r = r[0];
        assert_eq!(r.src, (0xB013_B521, 32));
        assert_eq!(r.dst, (0x5A91_1700, 24));
        assert_eq!(r.sport, (0, 65535));
        assert_eq!(r.dport, (1550, 1550));
        assert_eq!(r.proto, (6, 0xFF));
        let e = r.to_entry(7, 9);
        assert_eq!(e.prio, 7);
        assert_eq!(e.rule, 9);
        assert_eq!(e.ranges[1], (0x5A91_1700, 0x5A91_17FF));
        assert_eq!(e.ranges[2], (0, 0x1FFFF));
        assert_eq!(e.ranges[3], (1550, 1550));
        assert_eq!(e.ranges[4], (6, 6));
        let any = parse_rules("@0.0.0.0/0\t1.2.3.4/32\t1 : 2\t0 : 65535\t0x00/0x00\t0x0000/0x0000")
            .unwrap()[0]
            .to_entry(0, 0);
        assert_eq!(any.ranges[0], (0, 0xFFFF_FFFF));
        assert_eq!(any.ranges[2], (1, 2));
        assert_eq!(any.ranges[4], (0, 255));
    }

    #[test]
    fn rule_errors_name_the_line() {
        let bad = [
            "@1.2.3.4/33\t1.2.3.4/32\t0 : 1\t0 : 1\t0x06/0xFF\t0x0000/0x0000",
            "@1.2.3/32\t1.2.3.4/32\t0 : 1\t0 : 1\t0x06/0xFF\t0x0000/0x0000",
            "@1.2.3.4/32\t1.2.3.4/32\t5 : 1\t0 : 1\t0x06/0xFF\t0x0000/0x0000",
            "@1.2.3.4/32\t1.2.3.4/32\t0 : 70000\t0 : 1\t0x06/0xFF\t0x0000/0x0000",
            "@1.2.3.4/32\t1.2.3.4/32\t0 : 1\t0 : 1\t0x06/0x0F\t0x0000/0x0000",
            "@1.2.3.4/32\t1.2.3.4/32\t0 : 1\t0 : 1\t0x106/0xFF\t0x0000/0x0000",
            "@1.2.3.4/32\t1.2.3.4/32\t0 : 1\t0 : 1",
            "1.2.3.4/32\t1.2.3.4/32\t0 : 1\t0 : 1\t0x06/0xFF\t0x0000/0x0000",
            "@1.2.3.4/32\t1.2.3.4/32\t0 - 1\t0 : 1\t0x06/0xFF\t0x0000/0x0000",
            "@1.2.3.4/32\t1.2.3.4/32\t0 : 1\t0 : 1\t0x06/0xFF\t0x0000/zz",
            "@\u{e9}/32\t1.2.3.4/32\t0 : 1\t0 : 1\t0x06/0xFF\t0x0000/0x0000",
        ];
        for b in bad {
            let text = format!("\n{b}\n");
            let err = parse_rules(&text).unwrap_err();
            assert!(err.starts_with("line 2: "), "{err}");
        }
    }

    #[test]
    fn parses_trace() {
        let t =
            parse_trace("1483495555\t2954424111\t65535\t1649\t6\t0\t481\n\n1 2 3 4 17\n").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0],
            CbHeader {
                src: 1483495555,
                dst: 2954424111,
                sport: 65535,
                dport: 1649,
                proto: 6,
                filter: 481
            }
        );
        assert_eq!(t[0].key(), [1483495555, 2954424111, 65535, 1649, 6]);
        assert_eq!(t[1].filter, u32::MAX);
        for bad in [
            "1 2 3 4",
            "1 2 3 70000 6 0 1",
            "1 2 3 4 256",
            "x 2 3 4 6",
            "1 2 3 4 5 6 7 8",
        ] {
            let err = parse_trace(&format!("1 2 3 4 6\n{bad}")).unwrap_err();
            assert!(err.starts_with("line 2: "), "{err}");
        }
    }
}
