//! Position markers, as nfqws2 writes them (its manual, "Markers"): `5` and `-3` (absolute,
//! from the start or from the end of the payload), and a logical position with an optional
//! signed offset: `method`, `host`, `endhost`, `sld`, `midsld`, `endsld`, `sniext`, `extlen`
//! (`host+1`, `midsld-2`, ...).
//!
//! They resolve to a zero-based byte offset in the payload, which must lie inside it
//! (`0 <= pos < len`, as nfqws2's `CheckPos`). Logical positions come from the
//! [`Markers`](crate::payload::Markers) a detector found; `sld`, `midsld` and `endsld` are
//! computed on the host name's bytes: the second-level domain is the label before the last
//! dot (`iana` in `www.iana.org`), `midsld` its middle (`start + len/2`, `start + 1` for a
//! one-letter label), `endsld` the byte after it. `extlen` is accepted but never resolves
//! (the markers carry no TLS extensions length position).

use crate::payload::Markers;

/// The logical position a marker is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// An absolute offset (negative: from the end, -1 is the last byte).
    Abs,
    Method,
    Host,
    EndHost,
    Sld,
    MidSld,
    EndSld,
    SniExt,
    ExtLen,
}

/// One position marker: a base and a signed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    pub base: Base,
    pub offset: i16,
}

fn parse_i16(s: &str) -> Option<i16> {
    let t = s.strip_prefix('+').unwrap_or(s);
    if t.is_empty() || t.starts_with('+') {
        return None;
    }
    t.parse::<i16>().ok()
}

impl Marker {
    /// Parse one marker (`1`, `-5`, `host`, `midsld+1`, `endhost-2`, ...).
    pub fn parse(s: &str) -> Option<Marker> {
        let s = s.trim();
        if let Some(n) = parse_i16(s) {
            return Some(Marker {
                base: Base::Abs,
                offset: n,
            });
        }
        let cut = s.find(['+', '-']).unwrap_or(s.len());
        let (name, rest) = s.split_at(cut);
        let base = match name {
            "method" => Base::Method,
            "host" => Base::Host,
            "endhost" => Base::EndHost,
            "sld" => Base::Sld,
            "midsld" => Base::MidSld,
            "endsld" => Base::EndSld,
            "sniext" => Base::SniExt,
            "extlen" => Base::ExtLen,
            _ => return None,
        };
        let offset = if rest.is_empty() { 0 } else { parse_i16(rest)? };
        Some(Marker { base, offset })
    }

    /// Parse a comma-separated list (`1,midsld,sniext+1`). The error names the bad item.
    pub fn parse_list(s: &str) -> Result<Vec<Marker>, String> {
        if s.trim().is_empty() {
            return Err(String::from("empty marker list"));
        }
        s.split(',')
            .map(|p| Marker::parse(p).ok_or_else(|| format!("bad position marker '{p}'")))
            .collect()
    }

    /// The zero-based offset in `payload` this marker names, if it resolves inside it.
    pub fn resolve(&self, payload: &[u8], m: &Markers) -> Option<usize> {
        let len = payload.len() as i64;
        let d = self.offset as i64;
        let at = match self.base {
            Base::Abs => {
                if d < 0 {
                    len + d
                } else {
                    d
                }
            }
            Base::Method => m.method? as i64 + d,
            Base::Host => m.host?.0 as i64 + d,
            Base::EndHost => m.host?.1 as i64 + d,
            Base::SniExt => m.sniext? as i64 + d,
            Base::ExtLen => return None,
            Base::Sld | Base::MidSld | Base::EndSld => {
                let (hs, he) = m.host?;
                let host = payload.get(hs..he)?;
                let (s, l) = sld(host)?;
                let p = (hs + s) as i64;
                let base = match self.base {
                    Base::Sld => p,
                    Base::EndSld => p + l as i64,
                    _ if l == 1 => p + 1,
                    _ => p + (l / 2) as i64,
                };
                base + d
            }
        };
        (at >= 0 && at < len).then_some(at as usize)
    }
}

/// The second-level domain of a host name: its start and length (nfqws2's `FindNLD(.., 2)`).
pub fn sld(host: &[u8]) -> Option<(usize, usize)> {
    // the last dot, not at position 0
    let p2 = host.iter().rposition(|&c| c == b'.')?;
    if p2 == 0 {
        return None;
    }
    let p1 = host[..p2]
        .iter()
        .rposition(|&c| c == b'.')
        .map_or(0, |i| i + 1);
    Some((p1, p2 - p1))
}

/// Resolve a list: positions that resolve, sorted, without duplicates.
pub fn resolve_list(list: &[Marker], payload: &[u8], m: &Markers) -> Vec<usize> {
    let mut v: Vec<usize> = list.iter().filter_map(|k| k.resolve(payload, m)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_resolve() {
        let p = b"xxxxwww.iana.orgyyyy";
        let m = Markers {
            method: None,
            host: Some((4, 16)),
            sniext: Some(2),
        };
        let r = |s: &str| Marker::parse(s).unwrap().resolve(p, &m);
        assert_eq!(r("1"), Some(1));
        assert_eq!(r("-1"), Some(19));
        assert_eq!(r("20"), None);
        assert_eq!(r("host"), Some(4));
        assert_eq!(r("endhost"), Some(16));
        assert_eq!(r("endhost-2"), Some(14));
        assert_eq!(r("sld"), Some(8));
        assert_eq!(r("midsld"), Some(10));
        assert_eq!(r("endsld"), Some(12));
        assert_eq!(r("sniext+1"), Some(3));
        assert_eq!(r("method"), None);
        assert!(Marker::parse("hots").is_none());
        assert!(Marker::parse("host+").is_none());
        assert!(Marker::parse("host+x").is_none());
        assert!(Marker::parse("99999").is_none());
        assert_eq!(sld(b"a.b"), Some((0, 1)));
        assert_eq!(sld(b"localhost"), None);
    }
}
