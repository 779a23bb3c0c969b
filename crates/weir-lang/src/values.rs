//! Constants by type: how `ssh`, `10.0.0.0/8`, `echo-request`, `established`, `1h30m` or
//! `"eth*"` become numbers (see [`weir_wire::field`] for the encodings).

use std::net::{Ipv4Addr, Ipv6Addr};
use weir_wire::field::{ifname_prefix_range, ifname_value};
use weir_wire::DataType;

pub(crate) const PROTOS: &[(&str, u8)] = &[
    ("hopopt", 0),
    ("ip", 0),
    ("ipcomp", 108),
    ("icmp", 1),
    ("igmp", 2),
    ("ipip", 4),
    ("ipencap", 4),
    ("tcp", 6),
    ("egp", 8),
    ("udp", 17),
    ("ipv6", 41),
    ("gre", 47),
    ("esp", 50),
    ("ah", 51),
    ("icmpv6", 58),
    ("ipv6-icmp", 58),
    ("ospf", 89),
    ("pim", 103),
    ("vrrp", 112),
    ("l2tp", 115),
    ("sctp", 132),
    ("udplite", 136),
    ("dccp", 33),
    ("comp", 108),
    ("mptcp", 137),
];

/// A service name from the system's `/etc/services` (as nft's getservbyname), read once.
fn etc_service(name: &str) -> Option<u16> {
    static TABLE: std::sync::OnceLock<std::collections::HashMap<String, u16>> =
        std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| {
            let mut m = std::collections::HashMap::new();
            for l in std::fs::read_to_string("/etc/services")
                .unwrap_or_default()
                .lines()
            {
                let l = l.split('#').next().unwrap_or("");
                let mut w = l.split_whitespace();
                let (Some(n), Some(pp)) = (w.next(), w.next()) else {
                    continue;
                };
                let Some(port) = pp.split('/').next().and_then(|p| p.parse::<u16>().ok()) else {
                    continue;
                };
                for alias in std::iter::once(n).chain(w) {
                    m.entry(alias.to_string()).or_insert(port);
                }
            }
            m
        })
        .get(name)
        .copied()
}

pub(crate) const SERVICES: &[(&str, u16)] = &[
    ("ftp-data", 20),
    ("ftp", 21),
    ("ssh", 22),
    ("telnet", 23),
    ("smtp", 25),
    ("domain", 53),
    ("dns", 53),
    ("bootps", 67),
    ("bootpc", 68),
    ("dhcpv6-client", 546),
    ("dhcpv6-server", 547),
    ("printer", 515),
    ("ipp", 631),
    ("domain-s", 853),
    ("mdns", 5353),
    ("tftp", 69),
    ("http", 80),
    ("www", 80),
    ("kerberos", 88),
    ("pop3", 110),
    ("sunrpc", 111),
    ("ntp", 123),
    ("netbios-ns", 137),
    ("netbios-dgm", 138),
    ("netbios-ssn", 139),
    ("imap", 143),
    ("imap2", 143),
    ("snmp", 161),
    ("snmp-trap", 162),
    ("bgp", 179),
    ("ldap", 389),
    ("https", 443),
    ("microsoft-ds", 445),
    ("isakmp", 500),
    ("syslog", 514),
    ("submission", 587),
    ("ldaps", 636),
    ("rsync", 873),
    ("imaps", 993),
    ("pop3s", 995),
    ("openvpn", 1194),
    ("mysql", 3306),
    ("ms-wbt-server", 3389),
    ("ipsec-nat-t", 4500),
    ("sip", 5060),
    ("postgresql", 5432),
    ("http-alt", 8080),
];

pub(crate) const ICMP_TYPES: &[(&str, u8)] = &[
    ("echo-reply", 0),
    ("destination-unreachable", 3),
    ("source-quench", 4),
    ("redirect", 5),
    ("echo-request", 8),
    ("router-advertisement", 9),
    ("router-solicitation", 10),
    ("time-exceeded", 11),
    ("parameter-problem", 12),
    ("timestamp-request", 13),
    ("timestamp-reply", 14),
    ("info-request", 15),
    ("info-reply", 16),
    ("address-mask-request", 17),
    ("address-mask-reply", 18),
];

pub(crate) const ICMP6_TYPES: &[(&str, u8)] = &[
    ("destination-unreachable", 1),
    ("packet-too-big", 2),
    ("time-exceeded", 3),
    ("parameter-problem", 4),
    ("echo-request", 128),
    ("echo-reply", 129),
    ("mld-listener-query", 130),
    ("mld-listener-report", 131),
    ("mld-listener-done", 132),
    ("mld-listener-reduction", 132),
    ("nd-router-solicit", 133),
    ("nd-router-advert", 134),
    ("nd-neighbor-solicit", 135),
    ("nd-neighbor-advert", 136),
    ("nd-redirect", 137),
    ("router-renumbering", 138),
    ("ind-neighbor-solicit", 141),
    ("ind-neighbor-advert", 142),
    ("mld2-listener-report", 143),
];

pub const TCP_FLAGS: &[(&str, u8)] = &[
    ("fin", 0x01),
    ("syn", 0x02),
    ("rst", 0x04),
    ("psh", 0x08),
    ("ack", 0x10),
    ("urg", 0x20),
    ("ecn", 0x40),
    ("cwr", 0x80),
];

/// Connection states as the kernel encodes them (NF_CT_STATE_*_BIT).
pub const CT_STATES: &[(&str, u32)] = &[
    ("invalid", 1),
    ("established", 2),
    ("related", 4),
    ("new", 8),
    ("untracked", 64),
];

pub const CT_STATUS: &[(&str, u32)] = &[
    ("expected", 1),
    ("seen-reply", 2),
    ("assured", 4),
    ("confirmed", 8),
    ("snat", 16),
    ("dnat", 32),
    ("dying", 512),
];

pub(crate) const DSCP: &[(&str, u8)] = &[
    ("cs0", 0),
    ("cs1", 8),
    ("cs2", 16),
    ("cs3", 24),
    ("cs4", 32),
    ("cs5", 40),
    ("cs6", 48),
    ("cs7", 56),
    ("af11", 10),
    ("af12", 12),
    ("af13", 14),
    ("af21", 18),
    ("af22", 20),
    ("af23", 22),
    ("af31", 26),
    ("af32", 28),
    ("af33", 30),
    ("af41", 34),
    ("af42", 36),
    ("af43", 38),
    ("ef", 46),
    ("va", 44),
    ("lephb", 1),
    ("le", 1),
];

/// ICMP codes by name (nft's `icmp_code` type; it lists them as numbers).
pub(crate) const ICMP_CODES: &[(&str, u8)] = &[
    ("net-unreachable", 0),
    ("host-unreachable", 1),
    ("prot-unreachable", 2),
    ("port-unreachable", 3),
    ("frag-needed", 4),
    ("net-prohibited", 9),
    ("host-prohibited", 10),
    ("admin-prohibited", 13),
];

/// ICMPv6 codes by name (nft's `icmpv6_code` type).
pub(crate) const ICMP6_CODES: &[(&str, u8)] = &[
    ("no-route", 0),
    ("admin-prohibited", 1),
    ("addr-unreachable", 3),
    ("port-unreachable", 4),
    ("policy-fail", 5),
    ("reject-route", 6),
];

/// Routing realms of a stock /etc/iproute2/rt_realms.
pub(crate) const REALMS: &[(&str, u32)] = &[("cosmos", 0)];

fn lookup<T: Copy>(table: &[(&str, T)], w: &str) -> Option<T> {
    table.iter().find(|(n, _)| *n == w).map(|(_, v)| *v)
}

/// A symbolic constant of a type by its name in `table`, or an error listing the names.
fn symbol<T: Copy + Into<u128>>(
    dt: DataType,
    table: &[(&str, T)],
    w: &str,
) -> Result<u128, String> {
    lookup(table, w)
        .map(Into::into)
        .ok_or_else(|| format!("unknown {} '{w}' (one of: {})", describe(dt), names(table)))
}

fn names<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Parse an unsigned number: decimal or 0x hexadecimal.
pub fn parse_number(w: &str) -> Option<u128> {
    if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        u128::from_str_radix(h, 16).ok()
    } else if !w.is_empty() && w.bytes().all(|c| c.is_ascii_digit()) {
        w.parse().ok()
    } else {
        None
    }
}

fn max_of(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// Parse one value of a type (no ranges, prefixes or wildcards).
pub fn parse_scalar(dt: DataType, w: &str) -> Result<u128, String> {
    let num = || -> Result<u128, String> {
        let v = parse_number(w).ok_or_else(|| format!("'{w}' is not a valid {}", describe(dt)))?;
        if v > max_of(dt.bits()) {
            return Err(format!(
                "{w} is too large for {} ({} bits)",
                describe(dt),
                dt.bits()
            ));
        }
        Ok(v)
    };
    match dt {
        DataType::Ipv4Addr => w
            .parse::<Ipv4Addr>()
            .map(|a| u32::from(a) as u128)
            .or_else(|_| inet_aton(w).map(u128::from).ok_or(()))
            .map_err(|_| format!("'{w}' is not an IPv4 address")),
        DataType::Ipv6Addr => w
            .parse::<Ipv6Addr>()
            .map(u128::from)
            .map_err(|_| format!("'{w}' is not an IPv6 address")),
        DataType::EtherAddr => {
            let parts: Vec<&str> = w.split(':').collect();
            if parts.len() != 6 {
                return Err(format!(
                    "'{w}' is not an Ethernet address (aa:bb:cc:dd:ee:ff)"
                ));
            }
            let mut v = 0u128;
            for p in parts {
                let b = u8::from_str_radix(p, 16)
                    .map_err(|_| format!("'{w}' is not an Ethernet address"))?;
                v = (v << 8) | b as u128;
            }
            Ok(v)
        }
        _ if parse_number(w).is_some()
            && !matches!(
                dt,
                DataType::Ipv4Addr
                    | DataType::Ipv6Addr
                    | DataType::IfName
                    | DataType::Time
                    | DataType::Day
                    | DataType::Hour
                    | DataType::Date
                    | DataType::Str16
            ) =>
        {
            num()
        }
        DataType::InetProto => {
            if let Some(p) = lookup(PROTOS, w) {
                return Ok(p as u128);
            }
            num().map_err(|_| {
                format!(
                    "unknown protocol '{w}' (a number 0-255 or one of: {})",
                    names(PROTOS)
                )
            })
        }
        DataType::InetService => {
            if let Some(p) = lookup(SERVICES, w).or_else(|| etc_service(w)) {
                return Ok(p as u128);
            }
            num().map_err(|_| format!("'{w}' is not a port (0-65535 or a service name such as ssh, http, https, domain)"))
        }
        DataType::IcmpType => lookup(ICMP_TYPES, w).map(|v| v as u128).map_or_else(
            || {
                num()
                    .map_err(|_| format!("unknown ICMP type '{w}' (one of: {})", names(ICMP_TYPES)))
            },
            Ok,
        ),
        DataType::Icmp6Type => lookup(ICMP6_TYPES, w).map(|v| v as u128).map_or_else(
            || {
                num().map_err(|_| {
                    format!("unknown ICMPv6 type '{w}' (one of: {})", names(ICMP6_TYPES))
                })
            },
            Ok,
        ),
        DataType::TcpFlags => lookup(TCP_FLAGS, w).map(|v| v as u128).map_or_else(
            || num().map_err(|_| format!("unknown TCP flag '{w}' (one of: {})", names(TCP_FLAGS))),
            Ok,
        ),
        DataType::CtState => lookup(CT_STATES, w).map(|v| v as u128).map_or_else(
            || num().map_err(|_| format!("unknown ct state '{w}' (one of: {})", names(CT_STATES))),
            Ok,
        ),
        DataType::CtStatus => lookup(CT_STATUS, w).map(|v| v as u128).map_or_else(
            || num().map_err(|_| format!("unknown ct status '{w}' (one of: {})", names(CT_STATUS))),
            Ok,
        ),
        DataType::CtDir => match w {
            "original" => Ok(0),
            "reply" => Ok(1),
            _ => num().map_err(|_| format!("'{w}' is not a ct direction (original or reply)")),
        },
        DataType::NfProto => match w {
            "ipv4" => Ok(2),
            "ipv6" => Ok(10),
            _ => num().map_err(|_| format!("'{w}' is not a family (ipv4 or ipv6)")),
        },
        DataType::EtherType => match w {
            "ip" => Ok(0x0800),
            "ip6" => Ok(0x86dd),
            "arp" => Ok(0x0806),
            "vlan" => Ok(0x8100),
            "8021ad" => Ok(0x88a8),
            "8021q" => Ok(0x8100),
            _ => num()
                .map_err(|_| format!("'{w}' is not an EtherType (ip, ip6, arp, vlan or a number)")),
        },
        DataType::PktType => match w {
            "host" | "unicast" => Ok(0),
            "broadcast" => Ok(1),
            "multicast" => Ok(2),
            "other" => Ok(3),
            _ => num().map_err(|_| {
                format!("'{w}' is not a packet type (host, broadcast, multicast, other)")
            }),
        },
        DataType::Dscp => lookup(DSCP, w).map(|v| v as u128).map_or_else(
            || num().map_err(|_| format!("unknown DSCP '{w}' (cs0-cs7, af11-af43, ef, or 0-63)")),
            Ok,
        ),
        DataType::IfName => {
            if w.is_empty() {
                return Err("an empty interface name".to_string());
            }
            if w.len() > 15 {
                return Err(format!("interface name '{w}' is longer than 15 characters"));
            }
            Ok(ifname_value(w))
        }
        DataType::Time => parse_time_ms(w).map(|v| v as u128),
        DataType::IfIndex => ifindex_of(w),
        DataType::Integer(_) | DataType::Mark => num(),
        DataType::Boolean => match w {
            "exists" | "true" => Ok(1),
            "missing" | "false" => Ok(0),
            _ => Err(format!(
                "'{w}' is not a boolean (exists or missing, true or false)"
            )),
        },
        DataType::Hour => parse_hour(w),
        DataType::Day => parse_day(w),
        DataType::Date => parse_date(w),
        DataType::Uid => account_id("/etc/passwd", w).ok_or_else(|| format!("unknown user '{w}'")),
        DataType::Gid => account_id("/etc/group", w).ok_or_else(|| format!("unknown group '{w}'")),
        DataType::Devgroup => match w {
            "default" => Ok(0),
            _ => Err(format!("'{w}' is not a device group (default or a number)")),
        },
        DataType::IfType => symbol(dt, IF_TYPES, w),
        DataType::ClassId => parse_classid(w),
        DataType::DccpType => symbol(dt, DCCP_TYPES, w),
        DataType::IgmpType => symbol(dt, IGMP_TYPES, w),
        DataType::AddrType => symbol(dt, ADDR_TYPES, w),
        DataType::CtEvent => symbol(dt, CT_EVENTS, w),
        DataType::Ecn => match w {
            "not-ect" => Ok(0),
            "ect1" => Ok(1),
            "ect0" => Ok(2),
            "ce" => Ok(3),
            _ => Err(format!(
                "'{w}' is not an ECN code point (not-ect, ect1, ect0, ce, or 0-3)"
            )),
        },
        DataType::MptcpSubtype => symbol(dt, MPTCP_SUBTYPES, w),
        DataType::Str16 => {
            if w.is_empty() {
                return Err("an empty string".to_string());
            }
            if w.len() > 15 {
                return Err(format!("'{w}' is longer than 15 characters"));
            }
            Ok(ifname_value(w))
        }
        DataType::MhType => symbol(dt, MH_TYPES, w),
        DataType::IcmpCode => symbol(dt, ICMP_CODES, w),
        DataType::Icmp6Code => symbol(dt, ICMP6_CODES, w),
        DataType::Realm => symbol(dt, REALMS, w),
    }
}

pub(crate) const MPTCP_SUBTYPES: &[(&str, u8)] = &[
    ("mp-capable", 0),
    ("mp-join", 1),
    ("dss", 2),
    ("add-addr", 3),
    ("remove-addr", 4),
    ("mp-prio", 5),
    ("mp-fail", 6),
    ("mp-fastclose", 7),
    ("mp-tcprst", 8),
];

/// RTN_* route types (`fib daddr type local`).
pub(crate) const ADDR_TYPES: &[(&str, u8)] = &[
    ("unspec", 0),
    ("unicast", 1),
    ("local", 2),
    ("broadcast", 3),
    ("anycast", 4),
    ("multicast", 5),
    ("blackhole", 6),
    ("unreachable", 7),
    ("prohibit", 8),
    ("throw", 9),
    ("nat", 10),
    ("xresolve", 11),
];

/// Connection tracking event bits (`ct event set new,destroy`).
pub(crate) const CT_EVENTS: &[(&str, u32)] = &[
    ("new", 1),
    ("related", 2),
    ("destroy", 4),
    ("reply", 8),
    ("assured", 16),
    ("protoinfo", 32),
    ("helper", 64),
    ("mark", 128),
    ("seqadj", 256),
    ("secmark", 512),
    ("label", 1024),
];

/// ARPHRD_* link types, as nft names them (`meta iiftype`).
pub(crate) const IF_TYPES: &[(&str, u16)] = &[
    ("ether", 1),
    ("ppp", 512),
    ("ipip", 768),
    ("ipip6", 769),
    ("loopback", 772),
    ("sit", 776),
    ("ipgre", 778),
];

pub(crate) const DCCP_TYPES: &[(&str, u8)] = &[
    ("request", 0),
    ("response", 1),
    ("data", 2),
    ("ack", 3),
    ("dataack", 4),
    ("closereq", 5),
    ("close", 6),
    ("reset", 7),
    ("sync", 8),
    ("syncack", 9),
];

pub(crate) const IGMP_TYPES: &[(&str, u8)] = &[
    ("membership-query", 0x11),
    ("membership-report-v1", 0x12),
    ("membership-report-v2", 0x16),
    ("membership-report-v3", 0x22),
    ("leave-group", 0x17),
];

pub(crate) const MH_TYPES: &[(&str, u8)] = &[
    ("binding-refresh-request", 0),
    ("home-test-init", 1),
    ("careof-test-init", 2),
    ("home-test", 3),
    ("careof-test", 4),
    ("binding-update", 5),
    ("binding-acknowledgement", 6),
    ("binding-error", 7),
    ("fast-binding-update", 8),
    ("fast-binding-acknowledgement", 9),
    ("fast-binding-advertisement", 10),
    ("experimental-mobility-header", 11),
    ("home-agent-switch-message", 12),
];

pub(crate) const DAYS: &[&str] = &[
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];

/// An interface index: a number, or the index of the interface of that name on this host as
/// nft resolves it when it loads the rule (`iif "lo"`); an error if there is none.
fn ifindex_of(w: &str) -> Result<u128, String> {
    if let Some(v) = parse_number(w) {
        return if v <= u32::MAX as u128 {
            Ok(v)
        } else {
            Err(format!("{w} is too large for an interface index"))
        };
    }
    if w.is_empty() || w.len() > 15 || w.contains('/') || w == "." || w == ".." {
        return Err(format!("'{w}' is not an interface name"));
    }
    std::fs::read_to_string(format!("/sys/class/net/{w}/ifindex"))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .map(|i| i as u128)
        .ok_or_else(|| format!("interface '{w}' does not exist on this host (an interface index by name is resolved when the ruleset loads, as nft does)"))
}

/// `HH:MM` or `HH:MM:SS`: seconds since midnight.
fn parse_hour(w: &str) -> Result<u128, String> {
    let bad = || format!("'{w}' is not a time of day (HH:MM or HH:MM:SS)");
    let parts: Vec<&str> = w.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return Err(bad());
    }
    let mut v = [0u32; 3];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || p.len() > 2 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        v[i] = p.parse().map_err(|_| bad())?;
    }
    if v[0] > 23 || v[1] > 59 || v[2] > 60 {
        return Err(bad());
    }
    // a leap second past the day's end ("23:59:60") is the next midnight, as nft wraps it
    Ok(((v[0] * 3600 + v[1] * 60 + v[2]) % 86_400) as u128)
}

/// A day of the week by name (`Monday`, `mon`...) or number (0 is Sunday).
fn parse_day(w: &str) -> Result<u128, String> {
    if let Some(n) = parse_number(w) {
        return if n <= 6 {
            Ok(n)
        } else {
            Err(format!("{w} is not a day (0, Sunday, to 6, Saturday)"))
        };
    }
    let l = w.to_ascii_lowercase();
    DAYS.iter()
        .position(|d| *d == l || (l.len() >= 3 && d.starts_with(&l)))
        .map(|i| i as u128)
        .ok_or_else(|| format!("'{w}' is not a day of the week"))
}

/// `YYYY-MM-DD HH:MM[:SS]` (UTC) or a number of seconds since the epoch: nanoseconds.
fn parse_date(w: &str) -> Result<u128, String> {
    const NS: u128 = 1_000_000_000;
    if let Some(n) = parse_number(w) {
        return n
            .checked_mul(NS)
            .filter(|v| *v <= u64::MAX as u128)
            .ok_or_else(|| format!("{w} seconds is past the year 2554"));
    }
    let bad = || format!("'{w}' is not a date and time (YYYY-MM-DD HH:MM:SS)");
    let (date, time) = w.split_once(' ').unwrap_or((w, "00:00"));
    let d: Vec<&str> = date.split('-').collect();
    if d.len() != 3 {
        return Err(bad());
    }
    let num = |p: &str| -> Result<i64, String> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse().map_err(|_| bad())
    };
    let (y, m, dd) = (num(d[0])?, num(d[1])?, num(d[2])?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&dd) || !(1970..=9999).contains(&y) {
        return Err(bad());
    }
    let secs = days_from_civil(y, m, dd) * 86400 + parse_hour(time).map_err(|_| bad())? as i64;
    Ok(secs as u128 * NS)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A user or group id by name from `file` (`/etc/passwd`, `/etc/group`), or a number; `root`
/// is 0 everywhere.
fn account_id(file: &str, w: &str) -> Option<u128> {
    if let Some(n) = parse_number(w) {
        return (n <= u32::MAX as u128).then_some(n);
    }
    if w == "root" {
        return Some(0);
    }
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == w).then(|| f.nth(1)?.parse::<u32>().ok().map(|v| v as u128))?
    })
}

/// A traffic-control class id: `root`, `none` or `MAJOR:MINOR` in hexadecimal.
fn parse_classid(w: &str) -> Result<u128, String> {
    match w {
        "root" => return Ok(0xffff_ffff),
        "none" => return Ok(0),
        _ => {}
    }
    let bad = || format!("'{w}' is not a class id (root, none, or MAJOR:MINOR in hex)");
    let (a, b) = w.split_once(':').ok_or_else(bad)?;
    let hex = |p: &str| -> Result<u32, String> {
        if p.is_empty() {
            return Ok(0);
        }
        // (`1:0xc7cb`: nft reads a 0x prefix too)
        let p = p.strip_prefix("0x").unwrap_or(p);
        u16::from_str_radix(p, 16)
            .map(|v| v as u32)
            .map_err(|_| bad())
    };
    Ok(((hex(a)? << 16) | hex(b)?) as u128)
}

/// Parse one word as a range of values: a scalar, `a-b`, an address prefix `a/n`, an
/// interface wildcard `eth*`.
pub fn parse_range(dt: DataType, w: &str) -> Result<(u128, u128), String> {
    if dt == DataType::IfName {
        if let Some(lit) = w.strip_suffix("\\*") {
            let v = parse_scalar(dt, &format!("{lit}*"))?;
            return Ok((v, v));
        }
        if let Some(p) = w.strip_suffix('*') {
            if p.len() > 15 {
                return Err(format!("interface name '{w}' is longer than 15 characters"));
            }
            return Ok(ifname_prefix_range(p));
        }
    }
    if let Ok(v) = parse_scalar(dt, w) {
        return Ok((v, v));
    }
    if let Some((a, n)) = w.split_once('/') {
        // addresses, and integers as nft reads `ct mark 0x80000000/1`: the top bit (the
        // value masked by its first n bits, as a range)
        if matches!(
            dt,
            DataType::Ipv4Addr
                | DataType::Ipv6Addr
                | DataType::Mark
                | DataType::Integer(_)
                | DataType::Dscp
        ) {
            let base = parse_scalar(dt, a)?;
            return prefix_range(dt, base, n);
        }
    }
    // a-b: split at each '-' until both sides parse (names such as echo-request contain '-')
    for (i, _) in w.match_indices('-') {
        let (a, b) = (&w[..i], &w[i + 1..]);
        if let (Ok(lo), Ok(hi)) = (parse_scalar(dt, a), parse_scalar(dt, b)) {
            if lo > hi {
                return Err(format!("range {w} is empty: {a} is greater than {b}"));
            }
            return Ok((lo, hi));
        }
    }
    // report the scalar error (most useful)
    parse_scalar(dt, w).map(|v| (v, v))
}

/// The range of a prefix `base/len`.
pub fn prefix_range(dt: DataType, base: u128, len: &str) -> Result<(u128, u128), String> {
    let bits = dt.bits();
    let n: u32 = len
        .parse()
        .ok()
        .filter(|&n| n <= bits)
        .ok_or_else(|| format!("'{len}' is not a prefix length (0-{bits})"))?;
    let host = if n == 0 {
        max_of(bits)
    } else {
        max_of(bits - n)
    };
    // host bits are cleared, as nft clears them (`10.0.0.1/24` is `10.0.0.0/24`)
    let lo = base & !host & max_of(bits);
    Ok((lo, lo | host))
}

/// Parse a time such as `30s`, `1h30m`, `2d`, `500ms`, or a bare number of seconds; returns ms.
pub fn parse_time_ms(w: &str) -> Result<u64, String> {
    if let Some(v) = parse_number(w) {
        return u64::try_from(v)
            .ok()
            .and_then(|s| s.checked_mul(1000))
            .ok_or_else(|| format!("time {w} is too large"));
    }
    let mut total: u64 = 0;
    let mut num = String::new();
    let b: Vec<char> = w.chars().collect();
    let mut i = 0;
    let err = || format!("'{w}' is not a time (for example 30s, 5m, 1h30m, 2d, 500ms)");
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() {
            num.push(c);
            i += 1;
            continue;
        }
        let (mult, adv) = if c == 'm' && b.get(i + 1) == Some(&'s') {
            (1u64, 2)
        } else {
            match c {
                'd' => (86_400_000, 1),
                'h' => (3_600_000, 1),
                'm' => (60_000, 1),
                's' => (1000, 1),
                _ => return Err(err()),
            }
        };
        let n: u64 = num.parse().map_err(|_| err())?;
        total = n
            .checked_mul(mult)
            .and_then(|x| total.checked_add(x))
            .ok_or_else(err)?;
        num.clear();
        i += adv;
    }
    if !num.is_empty() {
        return Err(err());
    }
    Ok(total)
}

/// Print a value of a type the way nftables would write it.
pub fn format_value(dt: DataType, v: u128) -> String {
    match dt {
        DataType::Ipv4Addr => Ipv4Addr::from(v as u32).to_string(),
        DataType::Ipv6Addr => Ipv6Addr::from(v).to_string(),
        DataType::IfName => format!("\"{}\"", weir_wire::field::ifname_text(v)),
        DataType::InetProto => PROTOS
            .iter()
            .find(|(_, p)| *p as u128 == v)
            .map(|(n, _)| n.to_string())
            .unwrap_or_else(|| v.to_string()),
        DataType::Mark | DataType::CtState | DataType::CtStatus | DataType::TcpFlags => {
            format!("0x{v:x}")
        }
        _ => v.to_string(),
    }
}

/// A short name of a type for messages.
pub fn describe(dt: DataType) -> &'static str {
    match dt {
        DataType::Integer(_) => "integer",
        DataType::Ipv4Addr => "IPv4 address",
        DataType::Ipv6Addr => "IPv6 address",
        DataType::EtherAddr => "Ethernet address",
        DataType::EtherType => "EtherType",
        DataType::InetProto => "IP protocol",
        DataType::InetService => "port",
        DataType::Mark => "mark",
        DataType::IfName => "interface name",
        DataType::IfIndex => "interface index",
        DataType::TcpFlags => "TCP flag",
        DataType::IcmpType => "ICMP type",
        DataType::Icmp6Type => "ICMPv6 type",
        DataType::CtState => "ct state",
        DataType::CtStatus => "ct status",
        DataType::CtDir => "ct direction",
        DataType::NfProto => "family",
        DataType::PktType => "packet type",
        DataType::Dscp => "DSCP value",
        DataType::Time => "time",
        DataType::Boolean => "boolean",
        DataType::Hour => "time of day",
        DataType::Day => "day",
        DataType::Date => "date",
        DataType::Uid => "user",
        DataType::Gid => "group",
        DataType::Devgroup => "device group",
        DataType::IfType => "interface type",
        DataType::ClassId => "class id",
        DataType::DccpType => "DCCP type",
        DataType::IgmpType => "IGMP type",
        DataType::MhType => "Mobility Header type",
        DataType::IcmpCode => "ICMP code",
        DataType::Icmp6Code => "ICMPv6 code",
        DataType::Realm => "routing realm",
        DataType::AddrType => "address type",
        DataType::CtEvent => "ct event",
        DataType::Str16 => "string",
        DataType::Ecn => "ECN code point",
        DataType::MptcpSubtype => "MPTCP subtype",
    }
}

/// A number where an IPv4 address goes, as the address's value: nft reads `0xff` as 0.0.0.255
/// (inet_aton does). Only where an address is masked or compared with a masked one.
pub fn ipv4_from_number(w: &str) -> Option<u128> {
    if w.parse::<Ipv4Addr>().is_ok() {
        return None;
    }
    parse_number(w).filter(|&n| n <= u32::MAX as u128)
}

/// The ICMP types of `reject with icmp|icmpv6|icmpx NAME`: kind, name, code.
pub const REJECT_CODES: &[(&str, &str, u8)] = &[
    ("icmp", "net-unreachable", 0),
    ("icmp", "host-unreachable", 1),
    ("icmp", "prot-unreachable", 2),
    ("icmp", "port-unreachable", 3),
    ("icmp", "net-prohibited", 9),
    ("icmp", "host-prohibited", 10),
    ("icmp", "admin-prohibited", 13),
    ("icmpv6", "no-route", 0),
    ("icmpv6", "admin-prohibited", 1),
    ("icmpv6", "addr-unreachable", 3),
    ("icmpv6", "port-unreachable", 4),
    ("icmpv6", "policy-fail", 5),
    ("icmpv6", "reject-route", 6),
    ("icmpx", "no-route", 0),
    ("icmpx", "port-unreachable", 1),
    ("icmpx", "host-unreachable", 2),
    ("icmpx", "admin-prohibited", 3),
];

/// The code of `reject with KIND NAME` (a name of [`REJECT_CODES`] or a number 0-255).
pub fn reject_code(kind: &str, name: &str) -> Option<u8> {
    REJECT_CODES
        .iter()
        .find(|(k, n, _)| *k == kind && *n == name)
        .map(|x| x.2)
        .or_else(|| parse_number(name).and_then(|x| u8::try_from(x).ok()))
}

/// An IPv4 address in the forms the C library's resolver also reads (nft reads addresses
/// through it): parts in octal (`01`, leading zero) or hexadecimal (`0x7f`), fewer than
/// four parts (`127.1`). Only words with such a part: `1` is no address here.
fn inet_aton(w: &str) -> Option<u32> {
    let parts: Vec<&str> = w.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    if !parts.iter().any(|p| p.len() > 1 && p.starts_with('0')) {
        return None;
    }
    let num = |p: &str| -> Option<u64> {
        if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            u64::from_str_radix(h, 16).ok()
        } else if p.len() > 1 && p.starts_with('0') {
            u64::from_str_radix(&p[1..], 8).ok()
        } else {
            p.parse().ok()
        }
    };
    let vals: Vec<u64> = parts.iter().map(|p| num(p)).collect::<Option<_>>()?;
    let (head, last) = vals.split_at(vals.len() - 1);
    let mut v: u64 = 0;
    for (i, x) in head.iter().enumerate() {
        if *x > 255 {
            return None;
        }
        v |= x << (24 - 8 * i);
    }
    let room = 32 - 8 * head.len() as u32;
    if last[0] >= 1u64 << room {
        return None;
    }
    Some((v | last[0]) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_and_ranges() {
        assert_eq!(
            parse_scalar(DataType::Ipv4Addr, "198.18.0.1"),
            Ok(0xc612_0001)
        );
        assert_eq!(
            parse_range(DataType::Ipv4Addr, "198.18.0.0/15"),
            Ok((0xc612_0000, 0xc613_ffff))
        );
        // integer prefixes: the first n bits of the value
        assert_eq!(
            parse_range(DataType::Mark, "0x80000000/1"),
            Ok((0x8000_0000, 0xffff_ffff))
        );
        assert_eq!(parse_range(DataType::Mark, "0x10/28"), Ok((0x10, 0x1f)));
        assert!(parse_range(DataType::Mark, "0x10/33").is_err());
        // host bits cleared, as nft clears them
        assert_eq!(
            parse_range(DataType::Ipv4Addr, "198.18.0.1/15"),
            Ok((0xc612_0000, 0xc613_ffff))
        );
        assert_eq!(
            parse_range(DataType::Ipv6Addr, "2001:db8::1/64"),
            parse_range(DataType::Ipv6Addr, "2001:db8::/64")
        );
        assert_eq!(
            parse_range(DataType::InetService, "1024-65535"),
            Ok((1024, 65535))
        );
        assert_eq!(parse_range(DataType::InetService, "ssh"), Ok((22, 22)));
        assert!(parse_range(DataType::InetService, "65536").is_err());
        assert!(parse_range(DataType::InetService, "90-80").is_err());
        assert_eq!(parse_range(DataType::IcmpType, "echo-request"), Ok((8, 8)));
        assert_eq!(parse_range(DataType::Ipv6Addr, "::/0"), Ok((0, u128::MAX)));
        assert_eq!(
            parse_range(DataType::Ipv4Addr, "198.18.0.1-198.18.0.9"),
            Ok((0xc612_0001, 0xc612_0009))
        );
        assert_eq!(
            parse_scalar(DataType::EtherAddr, "00:11:22:33:44:ff"),
            Ok(0x0011_2233_44ff)
        );
        assert_eq!(parse_time_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_time_ms("500ms"), Ok(500));
        assert_eq!(parse_time_ms("30"), Ok(30_000));
        assert!(parse_time_ms("3x").is_err());
        let (lo, hi) = parse_range(DataType::IfName, "eth*").unwrap();
        assert!(lo < hi);
    }
}
