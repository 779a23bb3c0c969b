//! Constants as `nft list` prints them, by type: marks as `0x0000002a`, ports and integers in
//! decimal, protocols, ICMP types, connection states and TCP flags by name, durations as
//! `1m7s`, addresses with their prefix, interface names quoted.

use crate::values::{self, CT_STATES, CT_STATUS, TCP_FLAGS};
use std::net::{Ipv4Addr, Ipv6Addr};
use weir_wire::DataType;

/// The first name a table gives to value `v`, or `v` in decimal.
fn named<T: Copy + Into<u128>>(table: &[(&str, T)], v: u128) -> String {
    table
        .iter()
        .find(|(_, x)| (*x).into() == v)
        .map(|(n, _)| n.to_string())
        .unwrap_or_else(|| v.to_string())
}

/// A bitmask of flags by name, lowest bit first (`established,related,new`); bits without a
/// name in hexadecimal.
fn flags<T: Copy + Into<u128>>(table: &[(&str, T)], v: u128) -> String {
    let mut parts = Vec::new();
    let mut rest = v;
    let mut named: Vec<(&str, u128)> = table.iter().map(|(n, x)| (*n, (*x).into())).collect();
    named.sort_by_key(|(_, x)| *x);
    for (n, x) in named {
        if x != 0 && rest & x == x {
            parts.push(n.to_string());
            rest &= !x;
        }
    }
    if rest != 0 || parts.is_empty() {
        parts.push(format!("0x{rest:x}"));
    }
    parts.join(",")
}

/// A duration in milliseconds as nft prints it: `1d2h3m4s5ms`, `0s` for none.
pub fn duration(ms: u128) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    let mut s = String::new();
    let mut rest = ms;
    for (unit, len) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if rest >= len {
            s.push_str(&format!("{}{unit}", rest / len));
            rest %= len;
        }
    }
    if rest > 0 {
        s.push_str(&format!("{rest}ms"));
    }
    s
}

/// An IPv6 address as glibc's `inet_ntop` writes it (nft lists addresses with it): an
/// IPv4-compatible address keeps its IPv4 tail dotted (`::18.52.18.52`), as a mapped one does.
fn ipv6(v: u128) -> String {
    let a = Ipv6Addr::from(v);
    let w = a.segments();
    if w[..6] == [0; 6] && w[6] != 0 {
        let b = a.octets();
        return format!("::{}.{}.{}.{}", b[12], b[13], b[14], b[15]);
    }
    a.to_string()
}

/// One value of type `dt` as nft lists it.
pub fn format(dt: DataType, v: u128) -> String {
    match dt {
        DataType::Ipv4Addr => Ipv4Addr::from(v as u32).to_string(),
        DataType::Ipv6Addr => ipv6(v),
        DataType::EtherAddr => {
            let b = (v as u64).to_be_bytes();
            b[2..]
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        }
        DataType::Mark => format!("0x{v:08x}"),
        // (58 by the name /etc/protocols gives it, as nft prints it)
        DataType::InetProto if v == 58 => "ipv6-icmp".to_string(),
        DataType::InetProto => named(values::PROTOS, v),
        DataType::InetService => v.to_string(),
        DataType::IcmpType => named(values::ICMP_TYPES, v),
        DataType::Icmp6Type => named(values::ICMP6_TYPES, v),
        DataType::TcpFlags => flags(TCP_FLAGS, v),
        DataType::CtState => flags(CT_STATES, v),
        DataType::CtStatus => flags(CT_STATUS, v),
        DataType::CtEvent => flags(values::CT_EVENTS, v),
        DataType::CtDir => match v {
            0 => "original".to_string(),
            1 => "reply".to_string(),
            _ => v.to_string(),
        },
        DataType::NfProto => match v {
            2 => "ipv4".to_string(),
            10 => "ipv6".to_string(),
            _ => v.to_string(),
        },
        DataType::EtherType => match v {
            0x0800 => "ip".to_string(),
            0x86dd => "ip6".to_string(),
            0x0806 => "arp".to_string(),
            0x8100 => "8021q".to_string(),
            0x88a8 => "8021ad".to_string(),
            _ => format!("0x{v:04x}"),
        },
        DataType::PktType => match v {
            0 => "host".to_string(),
            1 => "broadcast".to_string(),
            2 => "multicast".to_string(),
            3 => "other".to_string(),
            _ => v.to_string(),
        },
        DataType::Dscp => values::DSCP
            .iter()
            .find(|(_, x)| *x as u128 == v)
            .map(|(n, _)| n.to_string())
            .unwrap_or_else(|| format!("0x{v:02x}")),
        DataType::IfName | DataType::Str16 => {
            format!("\"{}\"", weir_wire::field::ifname_text(v))
        }
        DataType::Time => duration(v),
        DataType::Boolean => if v != 0 { "exists" } else { "missing" }.to_string(),
        DataType::ClassId => match v {
            0xffff_ffff => "root".to_string(),
            0 => "none".to_string(),
            _ => format!("{:x}:{:x}", v >> 16, v & 0xffff),
        },
        DataType::IfType => named(values::IF_TYPES, v),
        DataType::DccpType => named(values::DCCP_TYPES, v),
        DataType::IgmpType => named(values::IGMP_TYPES, v),
        DataType::AddrType => named(values::ADDR_TYPES, v),
        DataType::MhType => named(values::MH_TYPES, v),
        DataType::MptcpSubtype => named(values::MPTCP_SUBTYPES, v),
        DataType::Realm => values::REALMS
            .iter()
            .find(|(_, x)| *x as u128 == v)
            .map(|(n, _)| format!("\"{n}\""))
            .unwrap_or_else(|| v.to_string()),
        DataType::Ecn => match v {
            0 => "not-ect".to_string(),
            1 => "ect1".to_string(),
            2 => "ect0".to_string(),
            3 => "ce".to_string(),
            _ => v.to_string(),
        },
        DataType::Devgroup if v == 0 => "\"default\"".to_string(),
        DataType::Day => values::DAYS
            .get(v as usize)
            .map(|d| {
                let mut c = d.chars();
                c.next()
                    .map(|f| f.to_uppercase().chain(c).collect::<String>())
                    .unwrap_or_default()
            })
            .map(|d| format!("\"{d}\""))
            .unwrap_or_else(|| v.to_string()),
        // a date is kept in nanoseconds; whole seconds print as the number nft reads back
        DataType::Date if v.is_multiple_of(1_000_000_000) => (v / 1_000_000_000).to_string(),
        DataType::Hour => {
            // 23:59:60 (a leap second) is the next day's 00:00
            let v = v % 86_400;
            match v % 60 {
                0 => format!("\"{:02}:{:02}\"", v / 3600, (v / 60) % 60),
                s => format!("\"{:02}:{:02}:{s:02}\"", v / 3600, (v / 60) % 60),
            }
        }
        _ => v.to_string(),
    }
}

/// Whether values of the type print as an address with a prefix length when a range is one.
fn is_address(dt: DataType) -> bool {
    matches!(dt, DataType::Ipv4Addr | DataType::Ipv6Addr)
}

/// An inclusive range of type `dt`: one value, an address prefix (`10.0.0.0/8`), or `lo-hi`.
pub fn range(dt: DataType, lo: u128, hi: u128) -> String {
    if lo == hi {
        return format(dt, lo);
    }
    if is_address(dt) {
        let bits = dt.bits();
        let span = hi.wrapping_sub(lo);
        // a prefix: lo aligned and hi - lo = 2^k - 1
        if span != u128::MAX && (span & span.wrapping_add(1)) == 0 && lo & span == 0 {
            let host = 128 - span.leading_zeros();
            return format!("{}/{}", format(dt, lo), bits - host);
        }
        if span == u128::MAX {
            return format!("{}/0", format(dt, lo));
        }
    }
    if dt == DataType::InetProto {
        // nft lists a range of protocols by number (`50-60`)
        return format!("{lo}-{hi}");
    }
    if dt == DataType::Time {
        // a range of durations in seconds: `60s-3600s`
        return format!("{}s-{}s", lo / 1000, hi / 1000);
    }
    if matches!(dt, DataType::IfName | DataType::Str16) {
        // a wildcard name: "eth*"
        let l = weir_wire::field::ifname_text(lo);
        return format!("\"{l}*\"");
    }
    format!("{}-{}", format(dt, lo), format(dt, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_as_nft_lists_them() {
        assert_eq!(format(DataType::Mark, 0x2a), "0x0000002a");
        assert_eq!(
            format(DataType::CtState, 2 | 4 | 8 | 64),
            "established,related,new,untracked"
        );
        assert_eq!(format(DataType::Time, 67_000), "1m7s");
        assert_eq!(format(DataType::Time, 30_000), "30s");
        assert_eq!(format(DataType::ClassId, 0x8765_4321), "8765:4321");
        assert_eq!(format(DataType::EtherType, 0x8100), "8021q");
        assert_eq!(format(DataType::InetProto, 6), "tcp");
        assert_eq!(format(DataType::TcpFlags, 0x12), "syn,ack");
        assert_eq!(
            range(DataType::Ipv4Addr, 0xc0a8_0200, 0xc0a8_02ff),
            "192.168.2.0/24"
        );
        assert_eq!(
            range(DataType::Ipv4Addr, 0xc0a8_0103, 0xc0a8_2137),
            "192.168.1.3-192.168.33.55"
        );
        assert_eq!(range(DataType::InetService, 33, 45), "33-45");
        assert_eq!(range(DataType::Ipv6Addr, 0, u128::MAX), "::/0");
    }
}

/// A byte rate or amount in a statement's words with the largest unit that divides it, as
/// nft lists it (`1024 kbytes/second`: `1 mbytes/second`).
pub fn byte_units(text: &str) -> String {
    let words: Vec<&str> = text.split(' ').collect();
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let next = words.get(i + 1).copied().unwrap_or("");
        let (unit, rest) = match next.split_once('/') {
            Some((u, r)) => (u, format!("/{r}")),
            None => (next, String::new()),
        };
        let mult: u128 = match unit {
            "bytes" => 1,
            "kbytes" => 1 << 10,
            "mbytes" => 1 << 20,
            "gbytes" => 1 << 30,
            _ => 0,
        };
        match words[i].parse::<u128>() {
            Ok(n) if mult > 0 => {
                let b = n * mult;
                let (v, u) = [
                    ("gbytes", 1u128 << 30),
                    ("mbytes", 1 << 20),
                    ("kbytes", 1 << 10),
                ]
                .iter()
                .find(|(_, d)| b >= *d && b.is_multiple_of(*d))
                .map_or((b, "bytes"), |(u, d)| (b / d, *u));
                out.push(format!("{v} {u}{rest}"));
                i += 2;
            }
            _ => {
                out.push(words[i].to_string());
                i += 1;
            }
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod byte_unit_tests {
    #[test]
    fn largest_unit() {
        assert_eq!(
            super::byte_units("rate over 1024 kbytes/second burst 2048 bytes"),
            "rate over 1 mbytes/second burst 2 kbytes"
        );
        assert_eq!(super::byte_units("rate 10/second"), "rate 10/second");
        assert_eq!(super::byte_units("1025 bytes"), "1025 bytes");
    }
}
