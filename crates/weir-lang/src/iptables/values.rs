//! Option values: addresses and networks, protocols, interfaces, ports and ranges, marks, TCP
//! flags, ICMP types, rates and NAT addresses, each translated to nft's form.

use super::rule::Proto;
use super::short;
use std::net::{Ipv4Addr, Ipv6Addr};

/// An address or network, normalised (host bits cleared, /32 and /128 dropped). `*` for 0/0.
pub(super) fn addr(s: &str, v6: bool) -> Result<String, String> {
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let max = if v6 { 128 } else { 32 };
    let plen: u32 = match p {
        None => max,
        Some(p) => match p.parse::<u32>() {
            Ok(n) if n <= max => n,
            _ => {
                // a dotted netmask (v4 only)
                let m: Ipv4Addr = if v6 { None } else { p.parse().ok() }
                    .ok_or_else(|| format!("'{}' is not a prefix length", short(p)))?;
                let m = u32::from(m);
                if m.leading_ones() + m.trailing_zeros() != 32 {
                    return Err(format!("'{}' is not a contiguous netmask", short(p)));
                }
                m.leading_ones()
            }
        },
    };
    if v6 {
        let ip: Ipv6Addr = a
            .parse()
            .map_err(|_| format!("'{}' is not an IPv6 address", short(a)))?;
        if plen == 0 {
            return Ok("*".into());
        }
        let mask = if plen == 128 {
            u128::MAX
        } else {
            !(u128::MAX >> plen)
        };
        let net = Ipv6Addr::from(u128::from(ip) & mask);
        Ok(if plen == 128 {
            net.to_string()
        } else {
            format!("{net}/{plen}")
        })
    } else {
        let ip: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("'{}' is not an IPv4 address", short(a)))?;
        if plen == 0 {
            return Ok("*".into());
        }
        let mask = if plen == 32 {
            u32::MAX
        } else {
            !(u32::MAX >> plen)
        };
        let net = Ipv4Addr::from(u32::from(ip) & mask);
        Ok(if plen == 32 {
            net.to_string()
        } else {
            format!("{net}/{plen}")
        })
    }
}

/// A plain address (for ranges): its text and its numeric value.
pub(super) fn plain_addr(s: &str, v6: bool) -> Result<(String, u128), String> {
    if v6 {
        let ip: Ipv6Addr = s
            .parse()
            .map_err(|_| format!("'{}' is not an IPv6 address", short(s)))?;
        Ok((ip.to_string(), u128::from(ip)))
    } else {
        let ip: Ipv4Addr = s
            .parse()
            .map_err(|_| format!("'{}' is not an IPv4 address", short(s)))?;
        Ok((ip.to_string(), u32::from(ip) as u128))
    }
}

pub(super) fn set_or_one(list: &[String]) -> String {
    if list.len() == 1 {
        list[0].clone()
    } else {
        format!("{{ {} }}", list.join(", "))
    }
}

/// `-p`: (nft l4proto value or None for "all", the protocol class).
pub(super) fn protocol(p: &str, v6: bool) -> Result<(Option<String>, Proto), String> {
    let lower = p.to_ascii_lowercase();
    let num = match lower.as_str() {
        "all" | "0" if !v6 || lower == "all" => return Ok((None, Proto::None)),
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmpv6" | "ipv6-icmp" | "icmp6" => 58,
        "sctp" => 132,
        "udplite" => 136,
        "dccp" => 33,
        "esp" => 50,
        "ah" => 51,
        "gre" => 47,
        "ipip" | "ipencap" => 4,
        "ospf" => 89,
        "vrrp" => 112,
        "igmp" => 2,
        "pim" => 103,
        n => match n.parse::<u8>() {
            Ok(x) => x,
            Err(_) => {
                return Err(format!(
                    "unsupported protocol '{}' (supported: all, tcp, udp, icmp, icmpv6, sctp, udplite, dccp, esp, ah, gre, ipip, ospf, vrrp, igmp, pim, or a number 0-255)",
                    short(p)
                ))
            }
        },
    };
    let class = match num {
        6 => Proto::Ports("tcp"),
        17 => Proto::Ports("udp"),
        132 => Proto::Ports("sctp"),
        136 => Proto::Ports("th"),
        1 => Proto::Icmp,
        58 => Proto::Icmp6,
        _ => Proto::Other,
    };
    let name = match num {
        6 => "tcp".to_string(),
        17 => "udp".to_string(),
        1 => "icmp".to_string(),
        58 => "icmpv6".to_string(),
        n => n.to_string(),
    };
    Ok((Some(name), class))
}

pub(super) fn iface(s: &str) -> Result<String, String> {
    let (base, wild) = match s.strip_suffix('+') {
        Some(b) => (b, true),
        None => (s, false),
    };
    if base.len() > 15
        || !base
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b':' | b'@'))
    {
        return Err(format!(
            "unsupported interface name '{}' (supported: up to 15 letters, digits, '_', '-', '.', ':', '@', optionally ending in '+')",
            short(s)
        ));
    }
    Ok(if wild {
        format!("{base}*")
    } else {
        base.to_string()
    })
}

fn port_num(s: &str) -> Result<u32, String> {
    s.parse::<u16>()
        .map(u32::from)
        .map_err(|_| format!("'{}' is not a port number", short(s)))
}

/// `a`, `a:b`, `:b`, `a:` (also `a-b`) to nft `a` or `a-b`.
pub(super) fn port_range(s: &str) -> Result<String, String> {
    let split = s.split_once(':').or_else(|| s.split_once('-'));
    match split {
        None => Ok(port_num(s)?.to_string()),
        Some((a, b)) => {
            let lo = if a.is_empty() { 0 } else { port_num(a)? };
            let hi = if b.is_empty() { 65535 } else { port_num(b)? };
            if lo > hi {
                return Err(format!("empty port range '{}'", short(s)));
            }
            Ok(if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            })
        }
    }
}

pub(super) fn num_range(s: &str, max: u32) -> Result<String, String> {
    let num = |x: &str| -> Result<u32, String> {
        x.parse::<u32>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| format!("'{}' is not a number 0-{max}", short(x)))
    };
    let split = s.split_once(':').or_else(|| s.split_once('-'));
    match split {
        None => Ok(num(s)?.to_string()),
        Some((a, b)) => {
            let lo = if a.is_empty() { 0 } else { num(a)? };
            let hi = if b.is_empty() { max } else { num(b)? };
            if lo > hi {
                return Err(format!("empty range '{}'", short(s)));
            }
            Ok(if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            })
        }
    }
}

pub(super) fn num_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse::<u32>(),
    };
    r.map_err(|_| format!("'{}' is not a 32-bit number", short(s)))
}

pub(super) fn mark(s: &str) -> Result<(u32, Option<u32>), String> {
    match s.split_once('/') {
        Some((v, m)) => Ok((num_u32(v)?, Some(num_u32(m)?))),
        None => Ok((num_u32(s)?, None)),
    }
}

pub(super) fn tcp_flags(s: &str) -> Result<u8, String> {
    let mut v = 0u8;
    for f in s.split(',') {
        v |= match f.to_ascii_uppercase().as_str() {
            "FIN" => 0x01,
            "SYN" => 0x02,
            "RST" => 0x04,
            "PSH" => 0x08,
            "ACK" => 0x10,
            "URG" => 0x20,
            // iptables knows these six (libxt_tcp): ALL is 0x3f, ECE and CWR have no name
            "ALL" => 0x3f,
            "NONE" => 0,
            _ => {
                return Err(format!(
                    "unknown TCP flag '{}' (supported: FIN, SYN, RST, PSH, ACK, URG, ALL, NONE)",
                    short(f)
                ))
            }
        };
    }
    Ok(v)
}

/// iptables' ICMP type names: (type, code); `(None, _)` for "any".
pub(super) fn icmp_type(s: &str, v6: bool) -> Result<(Option<u8>, Option<u8>), String> {
    // ip6tables' libxt_icmp6 has no "any" (iptables' libxt_icmp has)
    if s == "any" && !v6 {
        return Ok((None, None));
    }
    if let Some((t, c)) = s.split_once('/') {
        let t = t
            .parse::<u8>()
            .map_err(|_| format!("'{}' is not an ICMP type", short(t)))?;
        let c = c
            .parse::<u8>()
            .map_err(|_| format!("'{}' is not an ICMP code", short(c)))?;
        return Ok((Some(t), Some(c)));
    }
    if let Ok(t) = s.parse::<u8>() {
        return Ok((Some(t), None));
    }
    const V4: &[(&str, u8, Option<u8>)] = &[
        ("echo-reply", 0, None),
        ("pong", 0, None),
        ("destination-unreachable", 3, None),
        ("network-unreachable", 3, Some(0)),
        ("host-unreachable", 3, Some(1)),
        ("protocol-unreachable", 3, Some(2)),
        ("port-unreachable", 3, Some(3)),
        ("fragmentation-needed", 3, Some(4)),
        ("source-route-failed", 3, Some(5)),
        ("network-unknown", 3, Some(6)),
        ("host-unknown", 3, Some(7)),
        ("network-prohibited", 3, Some(9)),
        ("host-prohibited", 3, Some(10)),
        ("TOS-network-unreachable", 3, Some(11)),
        ("TOS-host-unreachable", 3, Some(12)),
        ("communication-prohibited", 3, Some(13)),
        ("host-precedence-violation", 3, Some(14)),
        ("precedence-cutoff", 3, Some(15)),
        ("source-quench", 4, None),
        ("redirect", 5, None),
        ("network-redirect", 5, Some(0)),
        ("host-redirect", 5, Some(1)),
        ("TOS-network-redirect", 5, Some(2)),
        ("TOS-host-redirect", 5, Some(3)),
        ("echo-request", 8, None),
        ("ping", 8, None),
        ("router-advertisement", 9, None),
        ("router-solicitation", 10, None),
        ("time-exceeded", 11, None),
        ("ttl-exceeded", 11, None),
        ("ttl-zero-during-transit", 11, Some(0)),
        ("ttl-zero-during-reassembly", 11, Some(1)),
        ("parameter-problem", 12, None),
        ("ip-header-bad", 12, Some(0)),
        ("required-option-missing", 12, Some(1)),
        ("timestamp-request", 13, None),
        ("timestamp-reply", 14, None),
        ("address-mask-request", 17, None),
        ("address-mask-reply", 18, None),
    ];
    const V6: &[(&str, u8, Option<u8>)] = &[
        ("destination-unreachable", 1, None),
        ("no-route", 1, Some(0)),
        ("communication-prohibited", 1, Some(1)),
        ("beyond-scope", 1, Some(2)),
        ("address-unreachable", 1, Some(3)),
        ("port-unreachable", 1, Some(4)),
        ("failed-policy", 1, Some(5)),
        ("reject-route", 1, Some(6)),
        ("packet-too-big", 2, None),
        ("time-exceeded", 3, None),
        ("ttl-exceeded", 3, None),
        ("ttl-zero-during-transit", 3, Some(0)),
        ("ttl-zero-during-reassembly", 3, Some(1)),
        ("parameter-problem", 4, None),
        ("bad-header", 4, Some(0)),
        ("unknown-header-type", 4, Some(1)),
        ("unknown-option", 4, Some(2)),
        ("echo-request", 128, None),
        ("ping", 128, None),
        ("echo-reply", 129, None),
        ("pong", 129, None),
        ("router-solicitation", 133, None),
        ("router-advertisement", 134, None),
        ("neighbour-solicitation", 135, None),
        ("neighbor-solicitation", 135, None),
        ("neighbour-advertisement", 136, None),
        ("neighbor-advertisement", 136, None),
        ("redirect", 137, None),
    ];
    let table = if v6 { V6 } else { V4 };
    table
        .iter()
        .find(|(n, _, _)| n.eq_ignore_ascii_case(s))
        .map(|&(_, t, c)| (Some(t), c))
        .ok_or_else(|| {
            format!(
                "unknown ICMP type '{}' (a name, a number or TYPE/CODE)",
                short(s)
            )
        })
}

pub(super) fn limit_rate(s: &str) -> Result<String, String> {
    let (n, unit) = s.split_once('/').unwrap_or((s, "sec"));
    let n: u32 = n
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("'{}' is not a rate such as 10/sec", short(s)))?;
    let u = match unit {
        "s" | "sec" | "second" => "second",
        "m" | "min" | "minute" => "minute",
        "h" | "hour" => "hour",
        "d" | "day" => "day",
        _ => {
            return Err(format!(
                "unknown rate unit '{}' (supported: sec, min, hour, day)",
                short(unit)
            ))
        }
    };
    Ok(format!("{n}/{u}"))
}

pub(super) fn parse_limit_back(l: &str) -> (String, u32) {
    // "limit rate R burst B packets"
    let w: Vec<&str> = l.split_whitespace().collect();
    let rate = w
        .get(2)
        .map(|s| s.to_string())
        .unwrap_or_else(|| "3/hour".into());
    let burst = w.get(4).and_then(|b| b.parse().ok()).unwrap_or(5);
    (rate, burst)
}

/// DNAT/SNAT `--to-*`: `a`, `a-b`, `a:p`, `a:p-q`, `a-b:p-q` (v6: `[a]:p`).
pub(super) fn nat_to(s: &str, v6: bool) -> Result<String, String> {
    let (addrs, ports) = if v6 {
        if let Some(rest) = s.strip_prefix('[') {
            let (a, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("'{}' has no ']'", short(s)))?;
            match after.strip_prefix(':') {
                Some(p) => (a, Some(p)),
                None if after.is_empty() => (a, None),
                None => return Err(format!("'{}' is not [address]:port", short(s))),
            }
        } else {
            (s, None)
        }
    } else {
        match s.split_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        }
    };
    let mut out = String::new();
    if !addrs.is_empty() {
        let (lo, hi) = match addrs.split_once('-') {
            Some((a, b)) => (a, Some(b)),
            None => (addrs, None),
        };
        let lo = plain_addr(lo, v6)?;
        out.push_str(&lo.0);
        if let Some(hi) = hi {
            let hi = plain_addr(hi, v6)?;
            if hi.1 < lo.1 {
                return Err(format!("empty address range '{}'", short(addrs)));
            }
            out.push('-');
            out.push_str(&hi.0);
        }
        if v6 && ports.is_some() {
            return Err("an IPv6 address with a port (supported: IPv6 without port)".into());
        }
    }
    if let Some(p) = ports {
        let r = num_range(p, 0xffff)?;
        out.push(':');
        out.push_str(&r);
    }
    if out.is_empty() {
        return Err("an empty address".into());
    }
    Ok(out)
}
