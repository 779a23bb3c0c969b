//! In-profile ranges over a flow direction's counters (nfqws2's `--in-range` / `--out-range`):
//! which packets of a connection an instance acts on, and when it is done with a direction
//! for good (its cutoff).
//!
//! Syntax, as nfqws2's: `a` (always), `x` (never), or `mX-mY`, `mX<mY`, `-mY`, `<mY`, `mX-`,
//! where `m` is a counter (`n` packets, `d` data packets, `b` payload bytes before this
//! packet, `s` the relative sequence of the packet's first byte, `p` of the byte after its
//! last), `-` makes the upper bound inclusive and `<` exclusive. A bound without a counter
//! letter takes the other bound's counter.

use std::fmt;

/// One direction's counters of a flow, before the current packet is counted (`n` and `d`
/// count it: the first packet is `n1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets, this one included.
    pub packets: u64,
    /// Packets with payload, this one included (if it has some).
    pub data_packets: u64,
    /// Payload bytes before this packet.
    pub bytes: u64,
    /// TCP: the relative sequence of this packet's first payload byte (0 for UDP).
    pub seq: u64,
    /// This packet's payload length.
    pub len: u64,
}

impl Counters {
    /// The value of counter `c` for this packet.
    pub fn get(&self, c: Counter) -> u64 {
        match c {
            Counter::Packets => self.packets,
            Counter::Data => self.data_packets,
            Counter::Bytes => self.bytes,
            Counter::Seq => self.seq,
            Counter::SeqEnd => self.seq + self.len,
        }
    }
}

/// A counter a range bound reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    /// `n`
    Packets,
    /// `d`
    Data,
    /// `b`
    Bytes,
    /// `s`
    Seq,
    /// `p`
    SeqEnd,
}

impl Counter {
    fn letter(self) -> char {
        match self {
            Counter::Packets => 'n',
            Counter::Data => 'd',
            Counter::Bytes => 'b',
            Counter::Seq => 's',
            Counter::SeqEnd => 'p',
        }
    }

    fn of(c: char) -> Option<Counter> {
        Some(match c {
            'n' => Counter::Packets,
            'd' => Counter::Data,
            'b' => Counter::Bytes,
            's' => Counter::Seq,
            'p' => Counter::SeqEnd,
            _ => return None,
        })
    }
}

/// A bound: a counter and a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bound {
    pub counter: Counter,
    pub value: u64,
}

/// A range of a direction's packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Range {
    /// `a`: every packet.
    Always,
    /// `x`: none.
    Never,
    /// From `from` (inclusive; None: from the first) to `to` (None: no end).
    Span {
        from: Option<Bound>,
        to: Option<Bound>,
        /// `-`: the upper bound is in the range; `<`: it is not.
        inclusive: bool,
    },
}

/// What a range says of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InRange {
    /// Act on it.
    Yes,
    /// Not this one (before the range).
    NotYet,
    /// Past the range, and every later packet will be too: the direction is done (cutoff).
    Past,
}

/// Why a range does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeError {
    pub text: String,
    pub why: &'static str,
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "range {:?}: {}", self.text, self.why)
    }
}

impl std::error::Error for RangeError {}

impl Range {
    /// Parse nfqws2's syntax (see the module's documentation).
    pub fn parse(text: &str) -> Result<Range, RangeError> {
        let err = |why| RangeError {
            text: text.to_string(),
            why,
        };
        match text {
            "a" => return Ok(Range::Always),
            "x" => return Ok(Range::Never),
            "" => return Err(err("empty")),
            _ => {}
        }
        let Some(sep) = text.find(['-', '<']) else {
            return Err(err("expected a, x, or a range with - or <"));
        };
        let inclusive = text.as_bytes()[sep] == b'-';
        let (lo, hi) = (&text[..sep], &text[sep + 1..]);
        let bound = |s: &str| -> Result<Option<(Option<Counter>, u64)>, RangeError> {
            if s.is_empty() {
                return Ok(None);
            }
            let mut cs = s.chars();
            let first = cs.next().unwrap_or('0');
            let (counter, digits) = match Counter::of(first) {
                Some(c) => (Some(c), cs.as_str()),
                None if first.is_ascii_digit() => (None, s),
                None => return Err(err("a bound's counter is one of n d b s p")),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err("a bound is a counter letter and a number"));
            }
            let v = digits
                .parse::<u64>()
                .map_err(|_| err("a bound's number is too large"))?;
            Ok(Some((counter, v)))
        };
        let (lo, hi) = (bound(lo)?, bound(hi)?);
        if lo.is_none() && hi.is_none() {
            return Err(err("a range needs a bound"));
        }
        let pick = |own: Option<Counter>, other: Option<(Option<Counter>, u64)>| {
            own.or(other.and_then(|o| o.0))
        };
        let mk = |b: Option<(Option<Counter>, u64)>,
                  other: Option<(Option<Counter>, u64)>|
         -> Result<Option<Bound>, RangeError> {
            match b {
                None => Ok(None),
                Some((c, v)) => match pick(c, other) {
                    Some(counter) => Ok(Some(Bound { counter, value: v })),
                    None => Err(err("a bound needs a counter letter (n d b s p)")),
                },
            }
        };
        let from = mk(lo, hi)?;
        let to = mk(hi, lo)?;
        if let (Some(f), Some(t)) = (from, to) {
            if f.counter == t.counter && (f.value > t.value || (f.value == t.value && !inclusive)) {
                return Err(err("the range is empty"));
            }
        }
        Ok(Range::Span {
            from,
            to,
            inclusive,
        })
    }

    /// Where a packet with these counters stands.
    pub fn check(&self, c: &Counters) -> InRange {
        match *self {
            Range::Always => InRange::Yes,
            Range::Never => InRange::Past,
            Range::Span {
                from,
                to,
                inclusive,
            } => {
                if let Some(t) = to {
                    let v = c.get(t.counter);
                    if v > t.value || (v == t.value && !inclusive) {
                        return InRange::Past;
                    }
                }
                match from {
                    Some(f) if c.get(f.counter) < f.value => InRange::NotYet,
                    _ => InRange::Yes,
                }
            }
        }
    }

    /// The most packets of a direction the range can take (what the kernel must queue of a
    /// connection: `connbytes 1:N` packets), when its end is in packets; None: no bound in
    /// packets (`a`, or an end in bytes or sequence), Some(0) for `x`.
    pub fn packet_bound(&self) -> Option<u64> {
        match *self {
            Range::Always => None,
            Range::Never => Some(0),
            Range::Span {
                to:
                    Some(Bound {
                        counter: Counter::Packets,
                        value,
                    }),
                inclusive,
                ..
            } => Some(if inclusive {
                value
            } else {
                value.saturating_sub(1)
            }),
            Range::Span { .. } => None,
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Range::Always => f.write_str("a"),
            Range::Never => f.write_str("x"),
            Range::Span {
                from,
                to,
                inclusive,
            } => {
                if let Some(b) = from {
                    write!(f, "{}{}", b.counter.letter(), b.value)?;
                }
                f.write_str(if *inclusive { "-" } else { "<" })?;
                if let Some(b) = to {
                    write!(f, "{}{}", b.counter.letter(), b.value)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: u64) -> Counters {
        Counters {
            packets: p,
            ..Counters::default()
        }
    }

    #[test]
    fn parses_nfqws2_forms() {
        for (text, shown) in [
            ("a", "a"),
            ("x", "x"),
            ("n2-n5", "n2-n5"),
            ("n2<n5", "n2<n5"),
            ("-s34228", "-s34228"),
            ("<d3", "<d3"),
            ("b100-", "b100-"),
            ("n2-5", "n2-n5"),
            ("2<d9", "d2<d9"),
        ] {
            assert_eq!(Range::parse(text).unwrap().to_string(), shown, "{text}");
        }
        for bad in [
            "",
            "n",
            "z1-",
            "n1",
            "-",
            "<",
            "n5-n2",
            "n3<n3",
            "1-2",
            "nx-",
            "n1-n99999999999999999999",
        ] {
            assert!(Range::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn bounds_and_cutoff() {
        let r = Range::parse("n2-n4").unwrap();
        let got: Vec<InRange> = (1..=6).map(|p| r.check(&n(p))).collect();
        use InRange::*;
        assert_eq!(got, [NotYet, Yes, Yes, Yes, Past, Past]);
        let r = Range::parse("n2<n4").unwrap();
        let got: Vec<InRange> = (1..=5).map(|p| r.check(&n(p))).collect();
        assert_eq!(got, [NotYet, Yes, Yes, Past, Past]);
        assert_eq!(Range::Never.check(&n(1)), Past);
        assert_eq!(Range::Always.check(&n(1_000_000)), Yes);
        // the sequence's end counter: a packet that reaches past s100 is still in -p100 only
        // while its last byte is within
        let r = Range::parse("-p100").unwrap();
        let c = |seq, len| Counters {
            seq,
            len,
            ..Counters::default()
        };
        assert_eq!(r.check(&c(0, 100)), Yes);
        assert_eq!(r.check(&c(0, 101)), Past);
        let r = Range::parse("<s100").unwrap();
        assert_eq!(r.check(&c(99, 1000)), Yes);
        assert_eq!(r.check(&c(100, 1)), Past);
    }

    #[test]
    fn packet_bounds() {
        let b = |t| Range::parse(t).unwrap().packet_bound();
        assert_eq!(b("a"), None);
        assert_eq!(b("x"), Some(0));
        assert_eq!(b("-n5"), Some(5));
        assert_eq!(b("<n5"), Some(4));
        assert_eq!(b("n2-n9"), Some(9));
        assert_eq!(b("-d5"), None);
        assert_eq!(b("-s1000"), None);
    }
}
