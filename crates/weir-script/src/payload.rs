//! Payload types and flow protocols as nfqws2 names them (its manual, "Protocol detection"),
//! and where the parts of a payload that position markers name lie.

/// The type of one packet's payload (or of a group of packets reassembled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PayloadType {
    /// No payload.
    Empty,
    /// A payload no detector recognised.
    Unknown,
    HttpReq,
    HttpReply,
    TlsClientHello,
    TlsServerHello,
    XmppStream,
    XmppStarttls,
    XmppProceed,
    XmppFeatures,
    MtprotoInitial,
    BtHandshake,
    QuicInitial,
    WireguardInitiation,
    WireguardResponse,
    WireguardCookie,
    WireguardKeepalive,
    Dht,
    UtpBtHandshake,
    DiscordIpDiscovery,
    Stun,
    DnsQuery,
    DnsResponse,
    DtlsClientHello,
    DtlsServerHello,
    /// ICMP carrying an IPv4 / IPv6 packet, other ICMP.
    Ipv4,
    Ipv6,
    Icmp,
}

impl PayloadType {
    /// Every type, in declaration order.
    pub const ALL: [PayloadType; 28] = [
        PayloadType::Empty,
        PayloadType::Unknown,
        PayloadType::HttpReq,
        PayloadType::HttpReply,
        PayloadType::TlsClientHello,
        PayloadType::TlsServerHello,
        PayloadType::XmppStream,
        PayloadType::XmppStarttls,
        PayloadType::XmppProceed,
        PayloadType::XmppFeatures,
        PayloadType::MtprotoInitial,
        PayloadType::BtHandshake,
        PayloadType::QuicInitial,
        PayloadType::WireguardInitiation,
        PayloadType::WireguardResponse,
        PayloadType::WireguardCookie,
        PayloadType::WireguardKeepalive,
        PayloadType::Dht,
        PayloadType::UtpBtHandshake,
        PayloadType::DiscordIpDiscovery,
        PayloadType::Stun,
        PayloadType::DnsQuery,
        PayloadType::DnsResponse,
        PayloadType::DtlsClientHello,
        PayloadType::DtlsServerHello,
        PayloadType::Ipv4,
        PayloadType::Ipv6,
        PayloadType::Icmp,
    ];

    /// nfqws2's name (`tls_client_hello`, `http_req`, ...).
    pub fn name(self) -> &'static str {
        use PayloadType::*;
        match self {
            Empty => "empty",
            Unknown => "unknown",
            HttpReq => "http_req",
            HttpReply => "http_reply",
            TlsClientHello => "tls_client_hello",
            TlsServerHello => "tls_server_hello",
            XmppStream => "xmpp_stream",
            XmppStarttls => "xmpp_starttls",
            XmppProceed => "xmpp_proceed",
            XmppFeatures => "xmpp_features",
            MtprotoInitial => "mtproto_initial",
            BtHandshake => "bt_handshake",
            QuicInitial => "quic_initial",
            WireguardInitiation => "wireguard_initiation",
            WireguardResponse => "wireguard_response",
            WireguardCookie => "wireguard_cookie",
            WireguardKeepalive => "wireguard_keepalive",
            Dht => "dht",
            UtpBtHandshake => "utp_bt_handshake",
            DiscordIpDiscovery => "discord_ip_discovery",
            Stun => "stun",
            DnsQuery => "dns_query",
            DnsResponse => "dns_response",
            DtlsClientHello => "dtls_client_hello",
            DtlsServerHello => "dtls_server_hello",
            Ipv4 => "ipv4",
            Ipv6 => "ipv6",
            Icmp => "icmp",
        }
    }

    /// The type nfqws2 calls `name`.
    pub fn from_name(name: &str) -> Option<PayloadType> {
        PayloadType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The flow protocol a payload of this type makes its flow (None: empty, unknown, ICMP).
    pub fn protocol(self) -> Option<Protocol> {
        use PayloadType::*;
        Some(match self {
            HttpReq | HttpReply => Protocol::Http,
            TlsClientHello | TlsServerHello => Protocol::Tls,
            XmppStream | XmppStarttls | XmppProceed | XmppFeatures => Protocol::Xmpp,
            MtprotoInitial => Protocol::Mtproto,
            BtHandshake => Protocol::Bt,
            QuicInitial => Protocol::Quic,
            WireguardInitiation | WireguardResponse | WireguardCookie | WireguardKeepalive => {
                Protocol::Wireguard
            }
            Dht => Protocol::Dht,
            UtpBtHandshake => Protocol::UtpBt,
            DiscordIpDiscovery => Protocol::Discord,
            Stun => Protocol::Stun,
            DnsQuery | DnsResponse => Protocol::Dns,
            DtlsClientHello | DtlsServerHello => Protocol::Dtls,
            Empty | Unknown | Ipv4 | Ipv6 | Icmp => return None,
        })
    }
}

/// A flow's application protocol, set by its first known payload and kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Http,
    Tls,
    Xmpp,
    Mtproto,
    Bt,
    Quic,
    Wireguard,
    Dht,
    UtpBt,
    Discord,
    Stun,
    Dns,
    Dtls,
}

impl Protocol {
    pub const ALL: [Protocol; 13] = [
        Protocol::Http,
        Protocol::Tls,
        Protocol::Xmpp,
        Protocol::Mtproto,
        Protocol::Bt,
        Protocol::Quic,
        Protocol::Wireguard,
        Protocol::Dht,
        Protocol::UtpBt,
        Protocol::Discord,
        Protocol::Stun,
        Protocol::Dns,
        Protocol::Dtls,
    ];

    /// nfqws2's name (`--filter-l7`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Tls => "tls",
            Protocol::Xmpp => "xmpp",
            Protocol::Mtproto => "mtproto",
            Protocol::Bt => "bt",
            Protocol::Quic => "quic",
            Protocol::Wireguard => "wireguard",
            Protocol::Dht => "dht",
            Protocol::UtpBt => "utp_bt",
            Protocol::Discord => "discord",
            Protocol::Stun => "stun",
            Protocol::Dns => "dns",
            Protocol::Dtls => "dtls",
        }
    }

    pub fn from_name(name: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Where, in a payload, the parts that position markers name lie (byte offsets into the
/// payload; for a TLS ClientHello, into the record as it is on the wire, record header
/// included). What a detector did not find is None, and a marker naming it does not
/// resolve.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Markers {
    /// HTTP: the first byte of the request's method.
    pub method: Option<usize>,
    /// The host name (HTTP `Host` header's value; TLS SNI's name): its first byte and the
    /// byte after its last.
    pub host: Option<(usize, usize)>,
    /// TLS: the first byte of the server_name extension's data.
    pub sniext: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in PayloadType::ALL {
            assert_eq!(PayloadType::from_name(t.name()), Some(t));
        }
        for p in Protocol::ALL {
            assert_eq!(Protocol::from_name(p.name()), Some(p));
        }
        assert_eq!(PayloadType::from_name("all"), None);
        assert_eq!(PayloadType::TlsClientHello.protocol(), Some(Protocol::Tls));
        assert_eq!(PayloadType::Empty.protocol(), None);
    }
}
