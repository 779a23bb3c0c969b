//! Capture files: pcap round trip, pcapng reading, truncated and corrupt files.

use std::borrow::Cow;
use std::net::Ipv4Addr;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use weir_wire::build::{self, tcp_flags as tf, Builder};
use weir_wire::pcap::{self, Error, Format, Packet, PcapWriter, Reader};
use weir_wire::{LinkType, PacketMeta};

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

fn sample(n: usize, link: LinkType) -> Vec<Packet> {
    (0..n)
        .map(|i| {
            let b = if link == LinkType::RawIp {
                Builder::raw()
            } else {
                Builder::new()
            };
            let data = b.udp(A, B, 1000 + i as u16, 53, &vec![i as u8; i * 7]);
            Packet {
                ts_nanos: 1_700_000_000_123_456_789 + i as u64 * 1_000_001,
                orig_len: data.len() as u32,
                data,
                link,
            }
        })
        .collect()
}

fn write_pcap(packets: &[Packet], link: LinkType) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), link).unwrap();
    for p in packets {
        w.write_packet(p).unwrap();
    }
    w.into_inner().unwrap()
}

#[test]
fn pcap_round_trip() {
    for link in [LinkType::Ethernet, LinkType::RawIp] {
        let pk = sample(20, link);
        let bytes = write_pcap(&pk, link);
        let dlt = u32::from_le_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!(dlt, pcap::dlt_of(link));
        let cap = pcap::read_bytes(&bytes).unwrap();
        assert_eq!(cap.format, Format::Pcap);
        assert_eq!(cap.link, link);
        assert!(cap.trailing_error.is_none());
        assert_eq!(cap.packets, pk);
        for p in &cap.packets {
            assert_eq!(PacketMeta::parse(&p.data, p.link).malformed, None);
        }
    }
}

#[test]
fn read_file_and_stream() {
    let pk = sample(5, LinkType::Ethernet);
    let bytes = write_pcap(&pk, LinkType::Ethernet);
    let path = std::env::temp_dir().join(format!("weir-wire-test-{}.pcap", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let cap = pcap::read_file(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(cap.packets, pk);
    let mut r = Reader::new(&bytes[..]).unwrap();
    assert_eq!(r.link(), Some(LinkType::Ethernet));
    assert_eq!(r.format(), Format::Pcap);
    let streamed: Vec<Packet> = r.by_ref().map(|p| p.unwrap()).collect();
    assert_eq!(streamed, pk);
    assert_eq!(r.packets_read(), 5);
    assert!(matches!(
        pcap::read_file("/nonexistent/x.pcap"),
        Err(Error::Io(_))
    ));
}

#[test]
fn truncated_last_record_keeps_the_others() {
    let pk = sample(4, LinkType::Ethernet);
    let bytes = write_pcap(&pk, LinkType::Ethernet);
    let last_start = bytes.len() - 16 - pk[3].data.len();
    for cut in last_start + 1..bytes.len() {
        let cap = pcap::read_bytes(&bytes[..cut]).unwrap();
        assert_eq!(cap.packets, pk[..3], "cut {cut}");
        match &cap.trailing_error {
            Some(Error::Truncated { packets: 3 }) => {}
            other => panic!("cut {cut}: {other:?}"),
        }
        assert!(cap
            .trailing_error
            .unwrap()
            .to_string()
            .contains("truncated"));
    }
    // A clean cut between records is a complete (shorter) capture.
    let cap = pcap::read_bytes(&bytes[..last_start]).unwrap();
    assert_eq!((cap.packets.len(), cap.trailing_error.is_none()), (3, true));
    // The file header itself cut short.
    for cut in 0..24 {
        assert!(
            matches!(
                pcap::read_bytes(&bytes[..cut]),
                Err(Error::Truncated { packets: 0 })
            ),
            "{cut}"
        );
    }
}

#[test]
fn corrupt_and_foreign_files() {
    // Not a capture.
    match pcap::read_bytes(b"GET / HTTP/1.1\r\n\r\n....") {
        Err(e @ Error::NotACapture { .. }) => assert!(e.to_string().contains("not a pcap")),
        other => panic!("{other:?}"),
    }
    // Unsupported link type (Linux cooked capture) is named.
    let mut bytes = write_pcap(&sample(1, LinkType::Ethernet), LinkType::Ethernet);
    bytes[20..24].copy_from_slice(&113u32.to_le_bytes());
    match pcap::read_bytes(&bytes) {
        Err(e @ Error::UnsupportedLinkType { dlt: 113, .. }) => {
            let s = e.to_string();
            assert!(s.contains("113") && s.contains("LINUX_SLL"), "{s}");
        }
        other => panic!("{other:?}"),
    }
    // A record with an absurd length.
    let mut bytes = write_pcap(&sample(2, LinkType::Ethernet), LinkType::Ethernet);
    let second = 24 + 16 + sample(2, LinkType::Ethernet)[0].data.len();
    bytes[second + 8..second + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let cap = pcap::read_bytes(&bytes).unwrap();
    assert_eq!(cap.packets.len(), 1);
    assert!(matches!(
        cap.trailing_error,
        Some(Error::Corrupt { packets: 1, .. })
    ));
    // LINKTYPE_IPV4 / IPV6 / RAW are raw IP.
    for dlt in [101u32, 228, 229] {
        let mut bytes = write_pcap(&sample(2, LinkType::RawIp), LinkType::RawIp);
        bytes[20..24].copy_from_slice(&dlt.to_le_bytes());
        let cap = pcap::read_bytes(&bytes).unwrap();
        assert_eq!((cap.link, cap.packets.len()), (LinkType::RawIp, 2));
    }
}

/// A big-endian, microsecond pcap written by hand, with a snapped packet
/// (orig_len > incl_len, and orig_len > snaplen).
#[test]
fn big_endian_microsecond_snapped() {
    let data = build::tcp4(A, B, 1, 2, tf::SYN, &[0; 100]);
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2c3d4u32.to_be_bytes());
    f.extend_from_slice(&2u16.to_be_bytes());
    f.extend_from_slice(&4u16.to_be_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&64u32.to_be_bytes()); // snaplen 64
    f.extend_from_slice(&1u32.to_be_bytes());
    f.extend_from_slice(&1_600_000_000u32.to_be_bytes());
    f.extend_from_slice(&250_000u32.to_be_bytes());
    f.extend_from_slice(&64u32.to_be_bytes());
    f.extend_from_slice(&(data.len() as u32).to_be_bytes());
    f.extend_from_slice(&data[..64]);
    let cap = pcap::read_bytes(&f).unwrap();
    assert!(cap.trailing_error.is_none());
    let p = &cap.packets[0];
    assert_eq!(p.ts_nanos, 1_600_000_000_250_000_000);
    assert_eq!((p.data.len(), p.orig_len as usize), (64, data.len()));
    // The snapped frame parses as what it is: an IPv4 packet longer than the bytes present.
    let m = PacketMeta::parse(&p.data, p.link);
    assert_eq!(m.malformed, Some(weir_wire::Malformed::BadIpv4TotalLength));
}

fn pcapng_sample() -> (Vec<u8>, Vec<Vec<u8>>) {
    let e1 = build::tcp4(A, B, 1, 2, tf::SYN, b"one");
    let r2 = Builder::raw().udp(A, B, 3, 4, b"two!");
    let e3 = build::udp4(A, B, 5, 6, b"three");
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    })
    .unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::RAW,
        snaplen: 0,
        options: vec![],
    })
    .unwrap();
    // Interface 0 counts nanoseconds; interface 1 has the default microseconds.
    w.write_pcapng_block(EnhancedPacketBlock {
        interface_id: 0,
        timestamp: Duration::from_nanos(1_700_000_000_000_000_001),
        original_len: e1.len() as u32,
        data: Cow::Borrowed(&e1),
        options: vec![],
    })
    .unwrap();
    w.write_pcapng_block(EnhancedPacketBlock {
        interface_id: 1,
        timestamp: Duration::from_nanos(1_700_000_000_000_002), // raw units: microseconds
        original_len: r2.len() as u32,
        data: Cow::Borrowed(&r2),
        options: vec![],
    })
    .unwrap();
    w.write_pcapng_block(SimplePacketBlock {
        original_len: e3.len() as u32,
        data: Cow::Borrowed(&e3),
    })
    .unwrap();
    (w.into_inner(), vec![e1, r2, e3])
}

#[test]
fn pcapng_read() {
    let (bytes, frames) = pcapng_sample();
    let cap = pcap::read_bytes(&bytes).unwrap();
    assert_eq!(cap.format, Format::PcapNg);
    assert_eq!(cap.link, LinkType::Ethernet);
    assert!(cap.trailing_error.is_none(), "{:?}", cap.trailing_error);
    assert_eq!(cap.packets.len(), 3);
    assert_eq!(cap.packets[0].data, frames[0]);
    assert_eq!(cap.packets[0].link, LinkType::Ethernet);
    assert_eq!(cap.packets[0].ts_nanos, 1_700_000_000_000_000_001);
    assert_eq!(cap.packets[1].data, frames[1]);
    assert_eq!(cap.packets[1].link, LinkType::RawIp);
    assert_eq!(cap.packets[1].ts_nanos, 1_700_000_000_000_002_000);
    assert_eq!(
        cap.packets[2].data, frames[2],
        "simple packet block padding trimmed"
    );
    for p in &cap.packets {
        assert_eq!(PacketMeta::parse(&p.data, p.link).malformed, None);
    }
    // Then write it back as pcap (Ethernet only) and read again.
    let eth: Vec<Packet> = cap
        .packets
        .iter()
        .filter(|p| p.link == LinkType::Ethernet)
        .cloned()
        .collect();
    let again = pcap::read_bytes(&write_pcap(&eth, LinkType::Ethernet)).unwrap();
    assert_eq!(again.packets, eth);
}

#[test]
fn pcapng_truncated_and_bad_interface() {
    let (bytes, _) = pcapng_sample();
    let cap = pcap::read_bytes(&bytes[..bytes.len() - 3]).unwrap();
    assert_eq!(cap.packets.len(), 2);
    assert!(
        matches!(cap.trailing_error, Some(Error::Truncated { packets: 2 })),
        "{:?}",
        cap.trailing_error
    );
    // An unsupported interface link type is reported when a packet uses it.
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::LINUX_SLL,
        snaplen: 0,
        options: vec![],
    })
    .unwrap();
    w.write_pcapng_block(EnhancedPacketBlock {
        interface_id: 0,
        timestamp: Duration::ZERO,
        original_len: 4,
        data: Cow::Borrowed(&[0, 0, 0, 0]),
        options: vec![],
    })
    .unwrap();
    let bytes = w.into_inner();
    match pcap::read_bytes(&bytes) {
        Err(Error::UnsupportedLinkType { dlt: 113, .. }) => {}
        other => panic!("{other:?}"),
    }
}

mod props {
    use proptest::prelude::*;
    use weir_wire::pcap;

    fn ng() -> Vec<u8> {
        super::pcapng_sample().0
    }

    fn classic() -> Vec<u8> {
        let pk = super::sample(3, weir_wire::LinkType::Ethernet);
        super::write_pcap(&pk, weir_wire::LinkType::Ethernet)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

        /// Corrupt captures give packets and/or an error, never a panic.
        #[test]
        fn mutated_captures_never_panic(
            use_ng in any::<bool>(),
            muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut f = if use_ng { ng() } else { classic() };
            for (i, b) in muts {
                let i = i.index(f.len());
                f[i] = b;
            }
            let n = cut.index(f.len() + 1);
            f.truncate(n.max(f.len() / 2));
            if let Ok(cap) = pcap::read_bytes(&f) {
                for p in &cap.packets {
                    let _ = weir_wire::PacketMeta::parse(&p.data, p.link);
                }
            }
        }

        #[test]
        fn random_after_magic_never_panics(
            magic in prop::sample::select(vec![
                0x0a0d0d0au32, 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1,
            ]),
            tail in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut f = magic.to_be_bytes().to_vec();
            f.extend_from_slice(&tail);
            let _ = pcap::read_bytes(&f);
        }
    }
}
