//! nfqws2's "standard fooling" (header changes that make the server refuse a fake: TTL,
//! autottl, bad sequence / acknowledgment numbers, TCP MD5 option, timestamps, flags, IPv6
//! extension headers) and "standard ipid" (the IPv4 identification of the packets sent),
//! parsed from an action's arguments and applied to a [`Seg`].

use super::args::Args;
use super::blobs::parse_hex;
use super::tcp::Seg;
use super::ActionError;

/// `delta,min-max`: a TTL `delta` hops from the path length guessed from the incoming TTL,
/// clamped to `min..=max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoTtl {
    pub delta: i32,
    pub min: u8,
    pub max: u8,
}

impl AutoTtl {
    pub fn parse(s: &str) -> Option<AutoTtl> {
        let (d, r) = s.split_once(',')?;
        let (lo, hi) = r.split_once('-')?;
        let delta: i32 = d.strip_prefix('+').unwrap_or(d).parse().ok()?;
        let (min, max): (u8, u8) = (lo.parse().ok()?, hi.parse().ok()?);
        (min <= max && (-255..=255).contains(&delta)).then_some(AutoTtl { delta, min, max })
    }

    /// The TTL for a server whose packets arrive with `incoming` (its initial TTL guessed
    /// among 64, 128 and 255 for paths under 32 hops), or None when the guess fails or the
    /// clamped result lands on the wrong side of the path length (nfqws2's `autottl`).
    pub fn eval(&self, incoming: u8) -> Option<u8> {
        let orig: i32 = match incoming {
            224..=255 => 255,
            97..=128 => 128,
            33..=64 => 64,
            _ => return None,
        };
        let hops = orig - incoming as i32;
        let fake = (hops + self.delta).clamp(self.min as i32, self.max as i32);
        if (self.delta < 0 && fake >= hops) || (self.delta >= 0 && fake < hops) {
            return None;
        }
        Some(fake as u8)
    }
}

/// The IPv4 identification of packets sent (`ip_id=seq|rnd|zero|none`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpId {
    /// The packets sent take the original's id + 1, + 2, ... in sending order.
    Seq,
    /// Pseudo-random, never 0.
    Rnd,
    Zero,
    /// The original's id, unchanged.
    None,
}

/// TCP flag names as nfqws2's `tcp_flags_set` takes them.
fn parse_flags(s: &str) -> Option<u8> {
    let mut f = 0u8;
    for n in s.split(',') {
        f |= match n.trim().to_ascii_uppercase().as_str() {
            "FIN" => 0x01,
            "SYN" => 0x02,
            "RST" => 0x04,
            "PUSH" | "PSH" => 0x08,
            "ACK" => 0x10,
            "URG" => 0x20,
            "ECE" => 0x40,
            "CWR" => 0x80,
            _ => return None,
        };
    }
    Some(f)
}

/// The fooling options of one action.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fooling {
    pub ip_ttl: Option<u8>,
    pub ip6_ttl: Option<u8>,
    pub ip_autottl: Option<AutoTtl>,
    pub ip6_autottl: Option<AutoTtl>,
    /// IPv6 extension headers to insert: type, bytes after next-header and length, at the
    /// front of the chain (else at its end), in the manual's order.
    pub ip6_ext: Vec<(u8, Vec<u8>, bool)>,
    pub tcp_seq: Option<i64>,
    pub tcp_ack: Option<i64>,
    pub tcp_ts: Option<i64>,
    pub tcp_md5: Option<[u8; 16]>,
    pub tcp_flags_set: u8,
    pub tcp_flags_unset: u8,
    pub tcp_ts_up: bool,
    pub tcp_nop_del: bool,
}

fn ext_data(
    a: &mut Args,
    name: &str,
    def: &[u8],
    unit: usize,
) -> Result<Option<Vec<u8>>, ActionError> {
    let Some(v) = a.get(name) else {
        return Ok(None);
    };
    let bin = if v.is_empty() {
        def.to_vec()
    } else {
        let h = v.strip_prefix("0x").unwrap_or(v);
        parse_hex(h).ok_or_else(|| a.bad(name, v, "invalid hex string"))?
    };
    if bin.len() < 6 || (bin.len() - 6) % unit != 0 {
        return Err(a.bad(name, v, &format!("length must be 6+N*{unit}")));
    }
    Ok(Some(bin))
}

impl Fooling {
    pub(crate) fn parse(a: &mut Args) -> Result<Fooling, ActionError> {
        let mut f = Fooling {
            ip_ttl: a.num("ip_ttl")?,
            ip6_ttl: a.num("ip6_ttl")?,
            ..Fooling::default()
        };
        for (k, slot) in [
            ("ip_autottl", &mut f.ip_autottl),
            ("ip6_autottl", &mut f.ip6_autottl),
        ] {
            if let Some(v) = a.get(k) {
                *slot = Some(
                    AutoTtl::parse(v)
                        .ok_or_else(|| a.bad(k, v, "expected delta,min-max like -2,3-20"))?,
                );
            }
        }
        let z6 = [0u8; 6];
        for (k, kind, front, unit) in [
            ("ip6_hopbyhop", 0u8, true, 8usize),
            ("ip6_hopbyhop2", 0, true, 8),
            ("ip6_destopt", 60, false, 8),
            ("ip6_routing", 43, false, 8),
            ("ip6_destopt2", 60, false, 8),
            ("ip6_ah", 51, false, 4),
        ] {
            if let Some(d) = ext_data(a, k, &z6, unit)? {
                f.ip6_ext.push((kind, d, front));
            }
        }
        f.tcp_seq = a.num("tcp_seq")?;
        f.tcp_ack = a.num("tcp_ack")?;
        f.tcp_ts = a.num("tcp_ts")?;
        if let Some(v) = a.get("tcp_md5") {
            let mut key = [0u8; 16];
            if !v.is_empty() {
                let h = v.strip_prefix("0x").unwrap_or(v);
                match parse_hex(h) {
                    Some(b) if b.len() == 16 => key.copy_from_slice(&b),
                    _ => return Err(a.bad("tcp_md5", v, "expected 16 bytes of hex")),
                }
            }
            f.tcp_md5 = Some(key);
        }
        for (k, slot) in [
            ("tcp_flags_set", &mut f.tcp_flags_set),
            ("tcp_flags_unset", &mut f.tcp_flags_unset),
        ] {
            if let Some(v) = a.get(k) {
                *slot = parse_flags(v).ok_or_else(|| {
                    a.bad(k, v, "expected a list of FIN,SYN,RST,PUSH,ACK,URG,ECE,CWR")
                })?;
            }
        }
        f.tcp_ts_up = a.flag("tcp_ts_up");
        f.tcp_nop_del = a.flag("tcp_nop_del");
        Ok(f)
    }

    /// The TTL / hop limit to set: autottl when it can be computed, else the fixed value.
    pub fn ttl(&self, v6: bool, incoming: Option<u8>) -> Option<u8> {
        let (fixed, auto) = if v6 {
            (self.ip6_ttl, self.ip6_autottl)
        } else {
            (self.ip_ttl, self.ip_autottl)
        };
        auto.zip(incoming).and_then(|(a, t)| a.eval(t)).or(fixed)
    }

    /// Apply everything to `s` (as nfqws2's `apply_fooling`, in its order).
    pub(crate) fn apply(&self, s: &mut Seg, incoming_ttl: Option<u8>) {
        if s.is_tcp() {
            if let Some(d) = self.tcp_seq {
                s.set_seq(s.seq().wrapping_add(d as u32));
            }
            if let Some(d) = self.tcp_ack {
                s.set_ack(s.ack().wrapping_add(d as u32));
            }
            s.set_flags((s.flags() & !self.tcp_flags_unset) | self.tcp_flags_set);
            if let Some(mut opts) = s.options() {
                if self.tcp_nop_del {
                    opts.retain(|o| o[0] != 1);
                }
                if let Some(d) = self.tcp_ts {
                    if let Some(ts) = opts.iter_mut().find(|o| o[0] == 8 && o.len() == 10) {
                        let v = u32::from_be_bytes([ts[2], ts[3], ts[4], ts[5]]);
                        ts[2..6].copy_from_slice(&v.wrapping_add(d as u32).to_be_bytes());
                    }
                }
                let before = opts.clone();
                if let Some(key) = self.tcp_md5 {
                    if !opts.iter().any(|o| o[0] == 19) {
                        let mut o = vec![19, 18];
                        o.extend_from_slice(&key);
                        opts.push(o);
                    }
                }
                if self.tcp_ts_up {
                    move_ts_up(&mut opts);
                }
                if !s.set_options(&opts) {
                    // no room for MD5: keep the other changes
                    let mut opts = before;
                    if self.tcp_ts_up {
                        move_ts_up(&mut opts);
                    }
                    s.set_options(&opts);
                }
            }
        }
        for (kind, data, front) in &self.ip6_ext {
            s.insert_ext(*kind, data, *front);
        }
        if let Some(t) = self.ttl(s.v6, incoming_ttl) {
            s.set_ttl(t);
        }
    }

    /// Only `tcp_ts_up` (what nfqws2 applies to the real parts of faked splits).
    pub(crate) fn apply_ts_up(&self, s: &mut Seg) {
        if self.tcp_ts_up {
            if let Some(mut opts) = s.options() {
                move_ts_up(&mut opts);
                s.set_options(&opts);
            }
        }
    }
}

fn move_ts_up(opts: &mut Vec<Vec<u8>>) {
    if let Some(i) = opts.iter().position(|o| o[0] == 8) {
        let ts = opts.remove(i);
        opts.insert(0, ts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autottl() {
        let a = AutoTtl::parse("-2,3-20").unwrap();
        // 64 - 50 = 14 hops; 12
        assert_eq!(a.eval(50), Some(12));
        // 128 - 126 = 2 hops; 0 clamps to 3 >= 2: fails
        assert_eq!(a.eval(126), None);
        assert_eq!(a.eval(20), None);
        let b = AutoTtl::parse("+1,3-20").unwrap();
        assert_eq!(b.eval(250), Some(6));
        assert!(AutoTtl::parse("1,20-3").is_none());
        assert!(AutoTtl::parse("x").is_none());
    }
}
