//! L7 detection: which payload type one packet's payload is (nfqws2's names, see
//! [`crate::payload::PayloadType`]), the host name it carries (TLS SNI, HTTP `Host`, the SNI
//! of a QUIC Initial's ClientHello) and where the parts that position markers name lie.
//!
//! [`detect`] looks at one payload, with the L4 protocol it came in, and never panics nor
//! reads out of bounds, whatever the bytes. The testers run in nfqws2's order (its
//! `desync.c`): for TCP TLS ClientHello, TLS ServerHello, HTTP request and reply, XMPP,
//! BitTorrent, MTProto; for UDP QUIC Initial, Discord IP discovery, STUN, DNS query and
//! response, DHT, DTLS hellos, uTP BitTorrent, WireGuard.
//!
//! A QUIC Initial is recognised by its header, as nfqws2 does; its host is filled only when
//! it decrypts and its CRYPTO data from offset 0 reaches the SNI (a ClientHello spread over
//! several datagrams gives no host here: [`quic::QuicReasm`]).
//!
//! What spans several packets is reassembled by the caller with [`reasm::Reasm`] (a TLS
//! ClientHello over TCP segments; [`Detection::incomplete`] says one is needed) or
//! [`quic::QuicReasm`] (a ClientHello whose CRYPTO frames are spread over several QUIC
//! Initial datagrams); both are bounded.

pub mod dns;
pub mod dtls;
pub mod http;
pub mod misc;
pub mod quic;
pub mod reasm;
pub mod stun;
pub mod tls;
pub mod wireguard;

use crate::payload::{Markers, PayloadType};

pub use quic::{QuicReasm, QuicReasmStatus};
pub use reasm::{Reasm, ReasmBudget, ReasmRefusal, ReasmStatus};

/// The transport a payload came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4 {
    Tcp,
    Udp,
}

/// What [`detect`] found in one payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    /// The payload's type: `Empty` for no bytes, `Unknown` when no tester recognised it.
    pub ptype: PayloadType,
    /// The host name it carries (lower case), if any: TLS / DTLS / QUIC SNI, HTTP `Host`.
    pub host: Option<String>,
    /// Where, in this payload, the method, the host name and the SNI extension lie.
    pub markers: Markers,
    /// A TLS ClientHello over TCP whose record or handshake message continues beyond this
    /// payload: how many bytes, counted from the payload's first byte, are needed at least
    /// (the whole message when its records' headers are all in sight; otherwise up to the
    /// next record header, and detection on the longer payload tells more). The caller
    /// reassembles ([`Reasm`]) and detects again. `host` and `markers` are as far as they
    /// could be read.
    pub incomplete: Option<usize>,
}

impl Detection {
    /// A detection of `ptype` with no host, markers nor reassembly.
    pub fn plain(ptype: PayloadType) -> Detection {
        Detection {
            ptype,
            host: None,
            markers: Markers::default(),
            incomplete: None,
        }
    }
}

/// The type of `payload`, its host name and markers. Never panics.
pub fn detect(l4: L4, payload: &[u8]) -> Detection {
    if payload.is_empty() {
        return Detection::plain(PayloadType::Empty);
    }
    match l4 {
        L4::Tcp => detect_tcp(payload),
        L4::Udp => detect_udp(payload),
    }
}

fn detect_tcp(p: &[u8]) -> Detection {
    if let Some(d) = tls::detect_record(p) {
        return d;
    }
    if let Some(d) = http::detect(p) {
        return d;
    }
    if let Some(t) = misc::detect_xmpp(p) {
        return Detection::plain(t);
    }
    if misc::is_bt_handshake(p) {
        return Detection::plain(PayloadType::BtHandshake);
    }
    if misc::is_mtproto(p) {
        return Detection::plain(PayloadType::MtprotoInitial);
    }
    Detection::plain(PayloadType::Unknown)
}

fn detect_udp(p: &[u8]) -> Detection {
    if quic::is_initial(p) {
        let host = quic::initial_host(p);
        return Detection {
            host,
            ..Detection::plain(PayloadType::QuicInitial)
        };
    }
    if misc::is_discord_ip_discovery(p) {
        return Detection::plain(PayloadType::DiscordIpDiscovery);
    }
    if stun::is_stun(p) {
        return Detection::plain(PayloadType::Stun);
    }
    if dns::is_query(p) {
        return Detection::plain(PayloadType::DnsQuery);
    }
    if dns::is_response(p) {
        return Detection::plain(PayloadType::DnsResponse);
    }
    if misc::is_dht(p) {
        return Detection::plain(PayloadType::Dht);
    }
    if let Some(d) = dtls::detect(p) {
        return d;
    }
    if misc::is_utp_bt_handshake(p) {
        return Detection::plain(PayloadType::UtpBtHandshake);
    }
    if let Some(t) = wireguard::detect(p) {
        return Detection::plain(t);
    }
    Detection::plain(PayloadType::Unknown)
}

/// Big-endian reads that say None past the end instead of panicking.
pub(crate) fn be16(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]) as usize)
}

pub(crate) fn be24(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at.checked_add(3)?)?;
    Some(((s[0] as usize) << 16) | ((s[1] as usize) << 8) | s[2] as usize)
}

pub(crate) fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}
