//! The fields a rule can read: packet header fields, packet metadata and connection state.
//!
//! Every field's value is an unsigned integer of at most 128 bits, in host order, so that a
//! match on any field is "value (after an optional mask) lies in a set of ranges". Addresses are
//! their numeric value (`198.18.0.1` is `0xc612_0001`), interface names are their 16 bytes
//! (IFNAMSIZ) read as a big-endian `u128` with zero padding, so that `"eth*"` is a range.
//!
//! Header fields are read from a parsed packet by [`crate::PacketMeta::get`]; metadata (`meta
//! mark`, interfaces) and connection-tracking fields (`ct ...`) come from the engine's context.

/// The value type of a field: decides how constants are parsed and printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// A plain unsigned integer of this many bits.
    Integer(u8),
    Ipv4Addr,
    Ipv6Addr,
    EtherAddr,
    /// 16-bit EtherType (`ip`, `ip6`, `arp`, `vlan`, or a number).
    EtherType,
    /// 8-bit IP protocol number (`tcp`, `udp`, `icmp`, ...).
    InetProto,
    /// 16-bit transport port (`ssh`, `http`, ... or a number).
    InetService,
    /// 32-bit packet mark.
    Mark,
    /// Interface name (IFNAMSIZ bytes, big-endian packed).
    IfName,
    /// Interface index (32 bits).
    IfIndex,
    /// 8-bit TCP flags bitmask (`fin`, `syn`, `rst`, `psh`, `ack`, `urg`, `ecn`, `cwr`).
    TcpFlags,
    /// 8-bit ICMP type (`echo-request`, ...).
    IcmpType,
    /// 8-bit ICMPv6 type (`echo-request`, `nd-neighbor-solicit`, ...).
    Icmp6Type,
    /// Connection state bitmask (`invalid`, `established`, `related`, `new`, `untracked`).
    CtState,
    /// Connection status bitmask (`expected`, `seen-reply`, `assured`, `confirmed`, `snat`, `dnat`, `dying`).
    CtStatus,
    /// Connection direction (`original`, `reply`).
    CtDir,
    /// Netfilter protocol family (`ipv4`, `ipv6`).
    NfProto,
    /// Packet type (`host`, `broadcast`, `multicast`, `other`).
    PktType,
    /// DSCP code point (6 bits: `cs0`..`cs7`, `af11`.., `ef`).
    Dscp,
    /// A time duration in milliseconds (`ct expiration`).
    Time,
    /// Whether something is there (`exists` / `missing`, `true` / `false`): 1 bit.
    Boolean,
    /// A time of day in seconds since midnight (`meta hour "17:00"`), UTC as nft's.
    Hour,
    /// A day of the week, 0 (Sunday) to 6 (`meta day "Monday"`).
    Day,
    /// A point in time, nanoseconds since the epoch (`meta time "2019-06-21 17:00:00"`).
    Date,
    /// A user id (`meta skuid root`: a name from /etc/passwd or a number).
    Uid,
    /// A group id (`meta skgid root`).
    Gid,
    /// A device group (`meta iifgroup default`: 0, or a number).
    Devgroup,
    /// A link type, ARPHRD_* (`meta iiftype ether`).
    IfType,
    /// A traffic-control class id (`meta priority 1:abcd`, `root`, `none`).
    ClassId,
    /// A DCCP packet type (`request`, `response`, `data`, ...).
    DccpType,
    /// An IGMP type (`membership-query`, ...).
    IgmpType,
    /// An ICMP code (`prot-unreachable`, `frag-needed`, ... or a number; nft lists numbers).
    IcmpCode,
    /// An ICMPv6 code (`policy-fail`, `reject-route`, ... or a number).
    Icmp6Code,
    /// A routing realm (`meta rtclassid`, `rt classid`: a name of /etc/iproute2/rt_realms
    /// or a number).
    Realm,
    /// A Mobility Header type (`binding-refresh-request`, ...).
    MhType,
    /// A route's address type, RTN_* (`fib daddr type local`).
    AddrType,
    /// Connection tracking events, a bitmask (`ct event set new,destroy`).
    CtEvent,
    /// The ECN field's code points (`not-ect`, `ect1`, `ect0`, `ce`): 2 bits.
    Ecn,
    /// An MPTCP option subtype (`mp-capable`, `mp-join`, ...): 4 bits.
    MptcpSubtype,
    /// A short string: a helper's name (`ct helper "ftp"`), 16 bytes as [`DataType::IfName`].
    Str16,
}

impl DataType {
    /// Width of the type's values in bits.
    pub fn bits(self) -> u32 {
        match self {
            DataType::Integer(b) => b as u32,
            DataType::Ipv4Addr => 32,
            DataType::Ipv6Addr => 128,
            DataType::EtherAddr => 48,
            DataType::EtherType => 16,
            DataType::InetProto => 8,
            DataType::InetService => 16,
            DataType::Mark => 32,
            DataType::IfName => 128,
            DataType::IfIndex => 32,
            DataType::TcpFlags => 8,
            DataType::IcmpType | DataType::Icmp6Type => 8,
            DataType::CtState | DataType::CtStatus => 32,
            DataType::CtDir => 8,
            DataType::NfProto => 8,
            DataType::PktType => 8,
            DataType::Dscp => 6,
            DataType::Time => 64,
            DataType::Boolean => 1,
            DataType::Hour | DataType::Uid | DataType::Gid | DataType::Devgroup => 32,
            DataType::Day | DataType::DccpType | DataType::IgmpType | DataType::MhType => 8,
            DataType::Date => 64,
            DataType::IfType => 16,
            DataType::ClassId => 32,
            DataType::AddrType => 16,
            DataType::CtEvent => 32,
            DataType::Str16 => 128,
            DataType::Ecn => 2,
            DataType::MptcpSubtype => 4,
            DataType::IcmpCode | DataType::Icmp6Code => 8,
            DataType::Realm => 32,
        }
    }

    /// Bitmask types: a list of flags on the right-hand side means "any of these bits set".
    pub fn is_bitmask(self) -> bool {
        matches!(
            self,
            DataType::TcpFlags | DataType::CtState | DataType::CtStatus | DataType::CtEvent
        )
    }

    /// The nftables name of the type, as written in `set { type ... }`.
    pub fn nft_name(self) -> &'static str {
        match self {
            DataType::Integer(_) => "integer",
            DataType::Ipv4Addr => "ipv4_addr",
            DataType::Ipv6Addr => "ipv6_addr",
            DataType::EtherAddr => "ether_addr",
            DataType::EtherType => "ether_type",
            DataType::InetProto => "inet_proto",
            DataType::InetService => "inet_service",
            DataType::Mark => "mark",
            DataType::IfName => "ifname",
            DataType::IfIndex => "iface_index",
            DataType::TcpFlags => "tcp_flag",
            DataType::IcmpType => "icmp_type",
            DataType::Icmp6Type => "icmpv6_type",
            DataType::CtState => "ct_state",
            DataType::CtStatus => "ct_status",
            DataType::CtDir => "ct_dir",
            DataType::NfProto => "nf_proto",
            DataType::PktType => "pkt_type",
            DataType::Dscp => "dscp",
            DataType::Time => "time",
            DataType::Boolean => "boolean",
            DataType::Hour => "hour",
            DataType::Day => "day",
            DataType::Date => "time",
            DataType::Uid => "uid",
            DataType::Gid => "gid",
            DataType::Devgroup => "devgroup",
            DataType::IfType => "iface_type",
            DataType::ClassId => "classid",
            DataType::DccpType => "dccp_pkttype",
            DataType::IgmpType => "igmp_type",
            DataType::MhType => "mh_type",
            DataType::AddrType => "fib_addrtype",
            DataType::CtEvent => "ct_event",
            DataType::Str16 => "string",
            DataType::Ecn => "ecn",
            DataType::MptcpSubtype => "mptcpopt_subtype",
            DataType::IcmpCode => "icmp_code",
            DataType::Icmp6Code => "icmpv6_code",
            DataType::Realm => "realm",
        }
    }

    /// Parse an nftables type name (`ipv4_addr`, `inet_service`, ...).
    pub fn from_nft_name(name: &str) -> Option<DataType> {
        Some(match name {
            "ipv4_addr" => DataType::Ipv4Addr,
            "ipv6_addr" => DataType::Ipv6Addr,
            "ether_addr" => DataType::EtherAddr,
            "ether_type" => DataType::EtherType,
            "inet_proto" => DataType::InetProto,
            "inet_service" => DataType::InetService,
            "mark" => DataType::Mark,
            "ifname" => DataType::IfName,
            "iface_index" => DataType::IfIndex,
            "tcp_flag" => DataType::TcpFlags,
            "icmp_type" => DataType::IcmpType,
            "icmpv6_type" => DataType::Icmp6Type,
            "ct_state" => DataType::CtState,
            "ct_status" => DataType::CtStatus,
            "ct_dir" => DataType::CtDir,
            "nf_proto" => DataType::NfProto,
            "pkt_type" => DataType::PktType,
            "dscp" => DataType::Dscp,
            "integer" => DataType::Integer(32),
            "time" => DataType::Time,
            "boolean" => DataType::Boolean,
            "hour" => DataType::Hour,
            "day" => DataType::Day,
            "uid" => DataType::Uid,
            "gid" => DataType::Gid,
            "devgroup" => DataType::Devgroup,
            "iface_type" => DataType::IfType,
            "classid" => DataType::ClassId,
            "dccp_pkttype" => DataType::DccpType,
            "igmp_type" => DataType::IgmpType,
            "mh_type" => DataType::MhType,
            "fib_addrtype" => DataType::AddrType,
            "ct_event" => DataType::CtEvent,
            "string" => DataType::Str16,
            "ecn" => DataType::Ecn,
            "mptcpopt_subtype" => DataType::MptcpSubtype,
            "icmp_code" => DataType::IcmpCode,
            "icmpv6_code" => DataType::Icmp6Code,
            "realm" => DataType::Realm,
            _ => return None,
        })
    }
}

/// Which packets a field exists in. A rule that reads an IPv4 field cannot match an IPv6 packet
/// (nftables adds the same implicit dependency).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Any packet (metadata, connection state).
    Meta,
    /// Ethernet header (needs a link layer).
    Link,
    /// IPv4 only.
    Ip4,
    /// IPv6 only.
    Ip6,
    /// A transport header of the given IP protocol number (either IP version).
    Transport(u8),
    /// The transport header of TCP, UDP, UDP-Lite, SCTP or DCCP (`th`).
    AnyPorts,
    /// ICMP (IPv4 only).
    Icmp,
    /// ICMPv6 (IPv6 only).
    Icmp6,
}

macro_rules! fields {
    ($($var:ident => $name:literal, $ty:expr, $layer:expr;)*) => {
        /// A readable field. See the module documentation for the value encoding.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Field { $($var,)* }

        impl Field {
            /// Every field, in declaration order.
            pub const ALL: &'static [Field] = &[$(Field::$var,)*];

            /// The nftables selector text (`ip saddr`, `meta mark`, `ct state`).
            pub fn name(self) -> &'static str {
                match self { $(Field::$var => $name,)* }
            }

            /// The value type.
            pub fn datatype(self) -> DataType {
                match self { $(Field::$var => $ty,)* }
            }

            /// Which packets carry the field.
            pub fn layer(self) -> Layer {
                match self { $(Field::$var => $layer,)* }
            }
        }
    };
}

use DataType as T;
use Layer as L;

fields! {
    // metadata (from the engine's context)
    MetaNfproto => "meta nfproto", T::NfProto, L::Meta;
    MetaL4proto => "meta l4proto", T::InetProto, L::Meta;
    MetaProtocol => "meta protocol", T::EtherType, L::Meta;
    MetaLength => "meta length", T::Integer(32), L::Meta;
    MetaMark => "meta mark", T::Mark, L::Meta;
    MetaIif => "meta iif", T::IfIndex, L::Meta;
    MetaOif => "meta oif", T::IfIndex, L::Meta;
    MetaIifname => "meta iifname", T::IfName, L::Meta;
    MetaOifname => "meta oifname", T::IfName, L::Meta;
    MetaPkttype => "meta pkttype", T::PktType, L::Meta;
    MetaPriority => "meta priority", T::ClassId, L::Meta;
    // link layer
    EtherSaddr => "ether saddr", T::EtherAddr, L::Link;
    EtherDaddr => "ether daddr", T::EtherAddr, L::Link;
    EtherType => "ether type", T::EtherType, L::Link;
    VlanId => "vlan id", T::Integer(12), L::Link;
    // IPv4
    IpVersion => "ip version", T::Integer(4), L::Ip4;
    IpHdrlength => "ip hdrlength", T::Integer(4), L::Ip4;
    IpDscp => "ip dscp", T::Dscp, L::Ip4;
    IpEcn => "ip ecn", T::Ecn, L::Ip4;
    IpLength => "ip length", T::Integer(16), L::Ip4;
    IpId => "ip id", T::Integer(16), L::Ip4;
    IpFragOff => "ip frag-off", T::Integer(16), L::Ip4;
    IpTtl => "ip ttl", T::Integer(8), L::Ip4;
    IpProtocol => "ip protocol", T::InetProto, L::Ip4;
    IpChecksum => "ip checksum", T::Integer(16), L::Ip4;
    IpSaddr => "ip saddr", T::Ipv4Addr, L::Ip4;
    IpDaddr => "ip daddr", T::Ipv4Addr, L::Ip4;
    // IPv6
    Ip6Version => "ip6 version", T::Integer(4), L::Ip6;
    Ip6Dscp => "ip6 dscp", T::Dscp, L::Ip6;
    Ip6Ecn => "ip6 ecn", T::Ecn, L::Ip6;
    Ip6Flowlabel => "ip6 flowlabel", T::Integer(20), L::Ip6;
    Ip6Length => "ip6 length", T::Integer(16), L::Ip6;
    Ip6Nexthdr => "ip6 nexthdr", T::InetProto, L::Ip6;
    Ip6Hoplimit => "ip6 hoplimit", T::Integer(8), L::Ip6;
    Ip6Saddr => "ip6 saddr", T::Ipv6Addr, L::Ip6;
    Ip6Daddr => "ip6 daddr", T::Ipv6Addr, L::Ip6;
    // TCP
    TcpSport => "tcp sport", T::InetService, L::Transport(6);
    TcpDport => "tcp dport", T::InetService, L::Transport(6);
    TcpSequence => "tcp sequence", T::Integer(32), L::Transport(6);
    TcpAckseq => "tcp ackseq", T::Integer(32), L::Transport(6);
    TcpDoff => "tcp doff", T::Integer(4), L::Transport(6);
    TcpFlags => "tcp flags", T::TcpFlags, L::Transport(6);
    TcpWindow => "tcp window", T::Integer(16), L::Transport(6);
    TcpChecksum => "tcp checksum", T::Integer(16), L::Transport(6);
    TcpUrgptr => "tcp urgptr", T::Integer(16), L::Transport(6);
    // UDP
    UdpSport => "udp sport", T::InetService, L::Transport(17);
    UdpDport => "udp dport", T::InetService, L::Transport(17);
    UdpLength => "udp length", T::Integer(16), L::Transport(17);
    UdpChecksum => "udp checksum", T::Integer(16), L::Transport(17);
    // SCTP ports
    SctpSport => "sctp sport", T::InetService, L::Transport(132);
    SctpDport => "sctp dport", T::InetService, L::Transport(132);
    // any transport header with ports
    ThSport => "th sport", T::InetService, L::AnyPorts;
    ThDport => "th dport", T::InetService, L::AnyPorts;
    // ICMP
    IcmpType => "icmp type", T::IcmpType, L::Icmp;
    IcmpCode => "icmp code", T::IcmpCode, L::Icmp;
    IcmpId => "icmp id", T::Integer(16), L::Icmp;
    IcmpSequence => "icmp sequence", T::Integer(16), L::Icmp;
    Icmp6Type => "icmpv6 type", T::Icmp6Type, L::Icmp6;
    Icmp6Code => "icmpv6 code", T::Icmp6Code, L::Icmp6;
    Icmp6Id => "icmpv6 id", T::Integer(16), L::Icmp6;
    Icmp6Sequence => "icmpv6 sequence", T::Integer(16), L::Icmp6;
    // fixed fields of one message type each (nft adds the `icmp type` dependency)
    IcmpGateway => "icmp gateway", T::Integer(32), L::Icmp;
    IcmpMtu => "icmp mtu", T::Integer(16), L::Icmp;
    Icmp6Mtu => "icmpv6 mtu", T::Integer(32), L::Icmp6;
    // connection tracking (from the engine's context)
    CtState => "ct state", T::CtState, L::Meta;
    CtStatus => "ct status", T::CtStatus, L::Meta;
    CtDirection => "ct direction", T::CtDir, L::Meta;
    CtMark => "ct mark", T::Mark, L::Meta;
    CtExpiration => "ct expiration", T::Time, L::Meta;
    CtL3proto => "ct l3proto", T::NfProto, L::Meta;
    CtProtocol => "ct protocol", T::InetProto, L::Meta;
    CtOriginalPackets => "ct original packets", T::Integer(64), L::Meta;
    CtOriginalBytes => "ct original bytes", T::Integer(64), L::Meta;
    CtReplyPackets => "ct reply packets", T::Integer(64), L::Meta;
    CtReplyBytes => "ct reply bytes", T::Integer(64), L::Meta;
    CtOriginalSaddr => "ct original saddr", T::Ipv4Addr, L::Ip4;
    CtOriginalDaddr => "ct original daddr", T::Ipv4Addr, L::Ip4;
    CtReplySaddr => "ct reply saddr", T::Ipv4Addr, L::Ip4;
    CtReplyDaddr => "ct reply daddr", T::Ipv4Addr, L::Ip4;
    CtOriginalProtoSrc => "ct original proto-src", T::InetService, L::Meta;
    CtOriginalProtoDst => "ct original proto-dst", T::InetService, L::Meta;
    // UDP-Lite, DCCP, SCTP's fixed fields, IPsec headers, IGMP: at fixed offsets in the
    // transport header of their protocol
    UdpliteSport => "udplite sport", T::InetService, L::Transport(136);
    UdpliteDport => "udplite dport", T::InetService, L::Transport(136);
    UdpliteCsumcov => "udplite csumcov", T::Integer(16), L::Transport(136);
    UdpliteChecksum => "udplite checksum", T::Integer(16), L::Transport(136);
    DccpSport => "dccp sport", T::InetService, L::Transport(33);
    DccpDport => "dccp dport", T::InetService, L::Transport(33);
    DccpType => "dccp type", T::DccpType, L::Transport(33);
    SctpVtag => "sctp vtag", T::Integer(32), L::Transport(132);
    SctpChecksum => "sctp checksum", T::Integer(32), L::Transport(132);
    AhNexthdr => "ah nexthdr", T::InetProto, L::Transport(51);
    AhHdrlength => "ah hdrlength", T::Integer(8), L::Transport(51);
    AhReserved => "ah reserved", T::Integer(16), L::Transport(51);
    AhSpi => "ah spi", T::Integer(32), L::Transport(51);
    AhSequence => "ah sequence", T::Integer(32), L::Transport(51);
    EspSpi => "esp spi", T::Integer(32), L::Transport(50);
    EspSequence => "esp sequence", T::Integer(32), L::Transport(50);
    CompNexthdr => "comp nexthdr", T::InetProto, L::Transport(108);
    CompFlags => "comp flags", T::Integer(8), L::Transport(108);
    CompCpi => "comp cpi", T::Integer(16), L::Transport(108);
    IgmpType => "igmp type", T::IgmpType, L::Transport(2);
    IgmpMrt => "igmp mrt", T::Integer(8), L::Transport(2);
    IgmpChecksum => "igmp checksum", T::Integer(16), L::Transport(2);
    IgmpGroup => "igmp group", T::Ipv4Addr, L::Transport(2);
    // IPv6 extension headers, found as the kernel's ipv6_find_hdr finds them (the first of
    // the type in the chain; none past a later fragment); `exthdr X` is their presence
    HbhNexthdr => "hbh nexthdr", T::InetProto, L::Ip6;
    HbhHdrlength => "hbh hdrlength", T::Integer(8), L::Ip6;
    RtNexthdr => "rt nexthdr", T::InetProto, L::Ip6;
    RtHdrlength => "rt hdrlength", T::Integer(8), L::Ip6;
    RtType => "rt type", T::Integer(8), L::Ip6;
    RtSegLeft => "rt seg-left", T::Integer(8), L::Ip6;
    Rt0Reserved => "rt0 reserved", T::Integer(32), L::Ip6;
    Rt2Reserved => "rt2 reserved", T::Integer(32), L::Ip6;
    Rt2Addr => "rt2 addr", T::Ipv6Addr, L::Ip6;
    SrhLastEntry => "srh last-entry", T::Integer(8), L::Ip6;
    SrhFlags => "srh flags", T::Integer(8), L::Ip6;
    SrhTag => "srh tag", T::Integer(16), L::Ip6;
    FragNexthdr => "frag nexthdr", T::InetProto, L::Ip6;
    FragReserved => "frag reserved", T::Integer(8), L::Ip6;
    FragFragOff => "frag frag-off", T::Integer(13), L::Ip6;
    FragReserved2 => "frag reserved2", T::Integer(2), L::Ip6;
    FragMoreFragments => "frag more-fragments", T::Integer(1), L::Ip6;
    FragId => "frag id", T::Integer(32), L::Ip6;
    DstNexthdr => "dst nexthdr", T::InetProto, L::Ip6;
    DstHdrlength => "dst hdrlength", T::Integer(8), L::Ip6;
    MhNexthdr => "mh nexthdr", T::InetProto, L::Ip6;
    MhHdrlength => "mh hdrlength", T::Integer(8), L::Ip6;
    MhType => "mh type", T::MhType, L::Ip6;
    MhReserved => "mh reserved", T::Integer(8), L::Ip6;
    MhChecksum => "mh checksum", T::Integer(16), L::Ip6;
    ExthdrHbh => "exthdr hbh", T::Boolean, L::Ip6;
    ExthdrRt => "exthdr rt", T::Boolean, L::Ip6;
    ExthdrFrag => "exthdr frag", T::Boolean, L::Ip6;
    ExthdrDst => "exthdr dst", T::Boolean, L::Ip6;
    ExthdrMh => "exthdr mh", T::Boolean, L::Ip6;
    // the wall clock (the engine's: tests set it)
    MetaHour => "meta hour", T::Hour, L::Meta;
    MetaDay => "meta day", T::Day, L::Meta;
    MetaTime => "meta time", T::Date, L::Meta;
    // the devices' types (ARPHRD)
    MetaIiftype => "meta iiftype", T::IfType, L::Meta;
    MetaOiftype => "meta oiftype", T::IfType, L::Meta;
    // the devices' groups
    MetaIifgroup => "meta iifgroup", T::Devgroup, L::Meta;
    MetaOifgroup => "meta oifgroup", T::Devgroup, L::Meta;
    // the CPU (the worker's)
    MetaCpu => "meta cpu", T::Integer(32), L::Meta;
    // the packet's trace flag (`meta nftrace set 1`: skb->nf_trace)
    MetaNftrace => "meta nftrace", T::Integer(1), L::Meta;
    // the socket's owner (NFQUEUE's UID/GID attributes)
    MetaSkuid => "meta skuid", T::Uid, L::Meta;
    MetaSkgid => "meta skgid", T::Gid, L::Meta;
    // connection tracking keys by direction, totals of both directions, zones (always 0:
    // weir's conntrack has no zones; `ct zone set` is not evaluated)
    CtZone => "ct zone", T::Integer(16), L::Meta;
    CtOriginalZone => "ct original zone", T::Integer(16), L::Meta;
    CtReplyZone => "ct reply zone", T::Integer(16), L::Meta;
    CtBytes => "ct bytes", T::Integer(64), L::Meta;
    CtPackets => "ct packets", T::Integer(64), L::Meta;
    CtAvgpkt => "ct avgpkt", T::Integer(64), L::Meta;
    CtOriginalAvgpkt => "ct original avgpkt", T::Integer(64), L::Meta;
    CtReplyAvgpkt => "ct reply avgpkt", T::Integer(64), L::Meta;
    CtOriginalIpSaddr => "ct original ip saddr", T::Ipv4Addr, L::Ip4;
    CtOriginalIpDaddr => "ct original ip daddr", T::Ipv4Addr, L::Ip4;
    CtReplyIpSaddr => "ct reply ip saddr", T::Ipv4Addr, L::Ip4;
    CtReplyIpDaddr => "ct reply ip daddr", T::Ipv4Addr, L::Ip4;
    CtOriginalIp6Saddr => "ct original ip6 saddr", T::Ipv6Addr, L::Ip6;
    CtOriginalIp6Daddr => "ct original ip6 daddr", T::Ipv6Addr, L::Ip6;
    CtReplyIp6Saddr => "ct reply ip6 saddr", T::Ipv6Addr, L::Ip6;
    CtReplyIp6Daddr => "ct reply ip6 daddr", T::Ipv6Addr, L::Ip6;
    CtOriginalProtocol => "ct original protocol", T::InetProto, L::Meta;
    CtReplyProtocol => "ct reply protocol", T::InetProto, L::Meta;
    CtReplyProtoSrc => "ct reply proto-src", T::InetService, L::Meta;
    CtReplyProtoDst => "ct reply proto-dst", T::InetService, L::Meta;
    // a pseudo-random number a read (the engine's per-worker generator, not the packet's)
    MetaRandom => "meta random", T::Integer(32), L::Meta;
    // ICMP and ICMPv6 fields behind the types nft's dependencies name (max-delay: an MLD
    // query; taddr: MLD and neighbour discovery; daddr: a redirect)
    IcmpChecksum => "icmp checksum", T::Integer(16), L::Icmp;
    Icmp6Checksum => "icmpv6 checksum", T::Integer(16), L::Icmp6;
    Icmp6MaxDelay => "icmpv6 max-delay", T::Integer(16), L::Icmp6;
    Icmp6ParameterProblem => "icmpv6 parameter-problem", T::Integer(32), L::Icmp6;
    Icmp6PacketTooBig => "icmpv6 packet-too-big", T::Integer(32), L::Icmp6;
    Icmp6Taddr => "icmpv6 taddr", T::Ipv6Addr, L::Icmp6;
    Icmp6Daddr => "icmpv6 daddr", T::Ipv6Addr, L::Icmp6;
    // the TCP MSS of the packet's route (`rt mtu`: the route's MTU less the IP and TCP
    // headers), known after routing
    RtMtu => "rt mtu", T::Integer(16), L::Meta;
    // the local socket the packet belongs to (`socket`: prerouting, input, output), as the
    // caller's socket lookup found it
    SocketTransparent => "socket transparent", T::Integer(1), L::Meta;
    SocketMark => "socket mark", T::Mark, L::Meta;
    SocketWildcard => "socket wildcard", T::Integer(1), L::Meta;
    // the net_cls class id of the packet's socket (`meta cgroup`): 0 on a host without a
    // net_cls hierarchy; no socket, the rule stops
    MetaCgroup => "meta cgroup", T::Integer(32), L::Meta;
    // the packet's IPsec state (`meta ipsec`/`secpath`, `ipsec in|out`, `rt ipsec`): weir
    // decrypts nothing and routes without IPsec policies, so none of its packets has any
    MetaIpsec => "meta ipsec", T::Boolean, L::Meta;
    RtIpsec => "rt ipsec", T::Boolean, L::Meta;
    MetaSecpath => "meta secpath", T::Boolean, L::Meta;
    IpsecReqid => "ipsec reqid", T::Integer(32), L::Meta;
    IpsecSpi => "ipsec spi", T::Integer(32), L::Meta;
    IpsecIpSaddr => "ipsec ip saddr", T::Ipv4Addr, L::Meta;
    IpsecIpDaddr => "ipsec ip daddr", T::Ipv4Addr, L::Meta;
    IpsecIp6Saddr => "ipsec ip6 saddr", T::Ipv6Addr, L::Meta;
    IpsecIp6Daddr => "ipsec ip6 daddr", T::Ipv6Addr, L::Meta;
    // state weir's packets never have: a route's realm (`meta rtclassid`, `rt classid`), a VRF
    // slave device (`meta sdif`, `sdifname`), a tunnel's metadata (`tunnel path`, `id`)
    MetaRtclassid => "meta rtclassid", T::Realm, L::Meta;
    MetaSdif => "meta sdif", T::IfIndex, L::Meta;
    MetaSdifname => "meta sdifname", T::IfName, L::Meta;
    RtClassid => "rt classid", T::Realm, L::Meta;
    TunnelPath => "tunnel path", T::Boolean, L::Meta;
    TunnelId => "tunnel id", T::Integer(32), L::Meta;
    // the next hop of the packet's route (`rt ip|ip6 nexthop`: its gateway, or the
    // destination on the link), known after routing
    RtIpNexthop => "rt ip nexthop", T::Ipv4Addr, L::Ip4;
    RtIp6Nexthop => "rt ip6 nexthop", T::Ipv6Addr, L::Ip6;
    // the connection's id (a keyed hash of its original tuple, as `nf_ct_get_id`) and the
    // name of its helper (`ct helper set`; none: the rule stops)
    CtId => "ct id", T::Integer(32), L::Meta;
    CtHelper => "ct helper", T::Str16, L::Meta;
    // ---- loaded and checked, not evaluated yet (see `Field::evaluated`) ----
    // metadata
    MetaIifkind => "meta iifkind", T::IfName, L::Meta;
    MetaOifkind => "meta oifkind", T::IfName, L::Meta;
    MetaSecmark => "meta secmark", T::Integer(32), L::Meta;
    MetaBroute => "meta broute", T::Boolean, L::Meta;
    // a chunk's presence (`sctp chunk init exists`) and its fields (`sctp chunk data tsn`,
    // typed by the checker), a TCP option's (`tcp option maxseg exists`, `... size`)
    SctpChunk => "sctp chunk", T::Boolean, L::Transport(132);
    SctpChunkField => "sctp chunk field", T::Integer(32), L::Transport(132);
    TcpOption => "tcp option", T::Boolean, L::Transport(6);
    TcpOptionField => "tcp option field", T::Integer(32), L::Transport(6);
    // IPv6 extension headers: the routing header's types as headers of their own
    ExthdrRt0 => "exthdr rt0", T::Boolean, L::Ip6;
    ExthdrRt2 => "exthdr rt2", T::Boolean, L::Ip6;
    ExthdrSrh => "exthdr srh", T::Boolean, L::Ip6;
    // tunnel headers (the inner packet's fields: `vxlan ip saddr`, see the checker)
    VxlanVni => "vxlan vni", T::Integer(24), L::Transport(17);
    VxlanFlags => "vxlan flags", T::Integer(8), L::Transport(17);
    GeneveVni => "geneve vni", T::Integer(24), L::Transport(17);
    GeneveFlags => "geneve flags", T::Integer(8), L::Transport(17);
    GeneveType => "geneve type", T::EtherType, L::Transport(17);
    GreVersion => "gre version", T::Integer(3), L::Transport(47);
    GreFlags => "gre flags", T::Integer(5), L::Transport(47);
    GreProtocol => "gre protocol", T::EtherType, L::Transport(47);
    // connection tracking keys not read yet
    CtEvent => "ct event", T::CtEvent, L::Meta;
    // routing (`rt`), route lookups (`fib`, typed by the checker), raw payload
    FibOif => "fib oif", T::IfIndex, L::Meta;
    FibOifname => "fib oifname", T::IfName, L::Meta;
    FibType => "fib type", T::AddrType, L::Meta;
    FibCheck => "fib check", T::Boolean, L::Meta;
    RawPayload => "raw payload", T::Integer(128), L::Meta;
    CtLabel => "ct label", T::Integer(7), L::Meta;
    // the sender's OS (`osf`)
    OsfName => "osf name", T::Str16, L::Meta;
    OsfVersion => "osf version", T::Str16, L::Meta;
}

impl Field {
    /// True for the fields weir's engine reads. The others (`meta hour`, IPv6 extension
    /// headers, tunnel headers, ...) load and check, so that a ruleset using them is
    /// understood and printed, but the engine does not evaluate them yet: the checker marks
    /// each rule that reads one as not evaluated, and `weir run` refuses such a ruleset.
    pub fn evaluated(self) -> bool {
        self < Field::MetaIifkind
    }

    /// Width in bits of the field's values.
    pub fn bits(self) -> u32 {
        self.datatype().bits()
    }

    /// True for fields whose value comes from connection tracking (`ct ...`).
    pub fn is_conntrack(self) -> bool {
        self.name().starts_with("ct ")
    }

    /// True for fields the packet headers carry (read by [`crate::PacketMeta::get`]).
    pub fn is_header(self) -> bool {
        // (`rt ip|ip6 nexthop` has its family's layer but comes from the route)
        !self.is_conntrack()
            && self.layer() != Layer::Meta
            && !matches!(self, Field::RtIpNexthop | Field::RtIp6Nexthop)
    }

    /// The IP protocol number the field requires, if any (`tcp dport` needs 6).
    pub fn required_l4proto(self) -> Option<u8> {
        match self.layer() {
            Layer::Transport(p) => Some(p),
            Layer::Icmp => Some(1),
            Layer::Icmp6 => Some(58),
            _ => None,
        }
    }

    /// Look a field up by its selector text (`ip saddr`, `meta mark`, `ct original packets`).
    /// Bare metadata keys that nftables accepts without `meta` (`iifname`, `mark`, `l4proto`)
    /// are accepted too.
    pub fn from_name(name: &str) -> Option<Field> {
        if let Some(f) = Field::ALL.iter().find(|f| f.name() == name) {
            return Some(*f);
        }
        let meta = format!("meta {name}");
        Field::ALL.iter().find(|f| f.name() == meta).copied()
    }
}

/// Pack an interface name into its field value (IFNAMSIZ = 16 bytes, big-endian, zero padded).
/// Names longer than 15 bytes are truncated as the kernel would refuse them; the checker reports
/// them before this is called.
pub fn ifname_value(name: &str) -> u128 {
    let mut buf = [0u8; 16];
    for (i, b) in name.bytes().take(15).enumerate() {
        buf[i] = b;
    }
    u128::from_be_bytes(buf)
}

/// The range of interface-name values matched by a wildcard prefix (`"eth*"` -> prefix `eth`).
pub fn ifname_prefix_range(prefix: &str) -> (u128, u128) {
    let lo = ifname_value(prefix);
    let n = prefix.len().min(15);
    let free_bits = (16 - n) * 8;
    let hi = if free_bits >= 128 {
        u128::MAX
    } else {
        lo | ((1u128 << free_bits) - 1)
    };
    (lo, hi)
}

/// Turn an interface-name value back into text.
pub fn ifname_text(v: u128) -> String {
    let b = v.to_be_bytes();
    let end = b.iter().position(|&c| c == 0).unwrap_or(16);
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// An address as fields hold it (IPv4 in the low 32 bits) as a `std::net::IpAddr`.
pub fn ip_addr(v: u128, v6: bool) -> std::net::IpAddr {
    if v6 {
        std::net::Ipv6Addr::from(v).into()
    } else {
        std::net::Ipv4Addr::from(v as u32).into()
    }
}

/// The network mask of a prefix of `len` bits for an IPv4 (`v6` false: 32 bits) or IPv6
/// address as fields hold it; lengths past the address's width keep every bit.
pub fn prefix_mask(len: u8, v6: bool) -> u128 {
    let bits: u32 = if v6 { 128 } else { 32 };
    let all = if v6 { u128::MAX } else { u32::MAX as u128 };
    all & !all.checked_shr((len as u32).min(bits)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in Field::ALL {
            assert_eq!(Field::from_name(f.name()), Some(*f), "{}", f.name());
        }
        assert_eq!(Field::from_name("iifname"), Some(Field::MetaIifname));
        assert_eq!(Field::from_name("mark"), Some(Field::MetaMark));
        assert_eq!(Field::from_name("ip nosuch"), None);
    }

    #[test]
    fn ifname_ranges() {
        let (lo, hi) = ifname_prefix_range("eth");
        let eth0 = ifname_value("eth0");
        let wlan0 = ifname_value("wlan0");
        assert!(lo <= eth0 && eth0 <= hi);
        assert!(!(lo <= wlan0 && wlan0 <= hi));
        assert_eq!(ifname_text(eth0), "eth0");
        let (lo, hi) = ifname_prefix_range("");
        assert_eq!((lo, hi), (0, u128::MAX));
    }
}
