//! Shared helpers of the desync tests: a TLS ClientHello for iana.org in TCP/IPv4 and
//! TCP/IPv6 packets, and readers of the packets the actions send.
#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use weir_script::desync::{apply, Action, Blobs, Input, Output};
use weir_script::payload::{Markers, PayloadType};
use weir_wire::build::{tcp_flags, Builder, Tcp};
use weir_wire::{LinkType, PacketMeta, L3};

pub const SEQ: u32 = 0xffff_fff0; // wraps inside the payload
pub const ACK: u32 = 0x0102_0304;
pub const IP_ID: u16 = 0x1234;
pub const TSVAL: u32 = 100_000;

pub fn hello() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/zapret2/files/fake/tls_clienthello_iana_org.bin"
    ))
    .expect("tls_clienthello_iana_org.bin")
}

pub fn markers(p: &[u8]) -> Markers {
    let i = p
        .windows(8)
        .position(|w| w == b"iana.org")
        .expect("iana.org in the hello");
    Markers {
        method: None,
        host: Some((i, i + 8)),
        sniext: Some(i - 5),
    }
}

fn ts_opts() -> Vec<u8> {
    let mut o = vec![1, 1, 8, 10];
    o.extend_from_slice(&TSVAL.to_be_bytes());
    o.extend_from_slice(&7u32.to_be_bytes());
    o
}

pub fn tcp_hdr(flags: u8) -> Tcp {
    Tcp::new(50000, 443, flags)
        .seq(SEQ)
        .ack(ACK)
        .options(&ts_opts())
}

pub fn pkt4(payload: &[u8]) -> Vec<u8> {
    Builder::raw().ip_id(IP_ID).ttl(64).tcp(
        Ipv4Addr::new(192, 0, 2, 1),
        Ipv4Addr::new(198, 51, 100, 7),
        &tcp_hdr(tcp_flags::PSH | tcp_flags::ACK),
        payload,
    )
}

pub fn pkt6(payload: &[u8]) -> Vec<u8> {
    Builder::raw().ttl(64).tcp(
        "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
        "2001:db8::2".parse::<Ipv6Addr>().unwrap(),
        &tcp_hdr(tcp_flags::PSH | tcp_flags::ACK),
        payload,
    )
}

pub fn action(name: &str, args: &[(&str, &str)]) -> Action {
    let a: Vec<(String, String)> = args
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Action::parse(name, &a).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn run(act: &Action, packet: &[u8], m: Markers) -> Output {
    let input = Input {
        packet,
        ptype: PayloadType::TlsClientHello,
        markers: m,
        incoming_ttl: None,
    };
    apply(act, &input, &Blobs::new())
}

/// What the tests read from a packet sent.
#[derive(Debug)]
pub struct Sent {
    pub v6: bool,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub ttl: u8,
    pub ip_id: u16,
    pub payload: Vec<u8>,
    pub l4_ok: bool,
    pub tcp_options: Vec<u8>,
}

/// Parse a TCP packet sent; asserts the IP lengths and (IPv4) header checksum.
pub fn read(p: &[u8]) -> Sent {
    let m = PacketMeta::parse(p, LinkType::RawIp);
    assert!(m.l3_ok() && m.has_l4 && m.malformed.is_none(), "{m:?}");
    assert_eq!(m.l3_end(), p.len(), "IP length field");
    let v6 = m.l3 == L3::Ipv6;
    if !v6 {
        assert!(m.ipv4_checksum_ok(p), "IPv4 header checksum");
    }
    let l4 = m.l4_off as usize;
    let (po, pl) = m.payload(p).unwrap();
    Sent {
        v6,
        seq: u32::from_be_bytes(p[l4 + 4..l4 + 8].try_into().unwrap()),
        ack: u32::from_be_bytes(p[l4 + 8..l4 + 12].try_into().unwrap()),
        flags: p[l4 + 13],
        ttl: if v6 { p[7] } else { p[8] },
        ip_id: if v6 {
            0
        } else {
            u16::from_be_bytes([p[4], p[5]])
        },
        payload: p[po..po + pl].to_vec(),
        l4_ok: m.transport_checksum_ok(p),
        tcp_options: p[l4 + 20..po].to_vec(),
    }
}
