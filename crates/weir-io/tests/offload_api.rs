//! The offload types of the AF_PACKET backend, without a kernel: the virtio-net header's
//! layout and meaning, and the ring geometry's limits.

use weir_io::afpacket::{Gso, GsoKind, RingConfig, VnetHdr};

#[test]
fn vnet_header_layout() {
    // struct virtio_net_hdr { u8 flags; u8 gso_type; u16 hdr_len, gso_size, csum_start,
    // csum_offset; } in the host's byte order.
    let h = VnetHdr {
        flags: VnetHdr::F_NEEDS_CSUM,
        gso_type: VnetHdr::GSO_TCPV4 | VnetHdr::GSO_ECN,
        hdr_len: 66,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
    };
    let b = h.to_bytes();
    assert_eq!(b[0], 1);
    assert_eq!(b[1], 0x81);
    assert_eq!(u16::from_ne_bytes([b[2], b[3]]), 66);
    assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 1448);
    assert_eq!(u16::from_ne_bytes([b[6], b[7]]), 34);
    assert_eq!(u16::from_ne_bytes([b[8], b[9]]), 16);
    assert_eq!(VnetHdr::from_bytes(b), h);
    assert!(h.needs_csum() && !h.data_valid());
    assert_eq!(h.csum(), Some((34, 16)));
    assert_eq!(
        h.gso(),
        Some(Gso {
            kind: GsoKind::Tcp4,
            size: 1448,
            ecn: true
        })
    );
    assert_eq!(VnetHdr::tcp_gso(false, 34, 32, 1448).hdr_len, 66);
    assert_eq!(
        VnetHdr::tcp_gso(false, 34, 32, 1448),
        VnetHdr {
            gso_type: VnetHdr::GSO_TCPV4,
            ..h
        }
    );
    assert_eq!(
        VnetHdr::tcp_gso(true, 54, 20, 1440).gso_type,
        VnetHdr::GSO_TCPV6
    );
    assert_eq!(VnetHdr::partial_csum(34, 6).csum(), Some((34, 6)));
    assert_eq!(VnetHdr::partial_csum(34, 6).gso(), None);
    assert_eq!(VnetHdr::none().to_bytes(), [0; 10]);
}

#[test]
fn gso_kinds() {
    let kind = |t: u8| {
        VnetHdr {
            gso_type: t,
            gso_size: 1000,
            ..VnetHdr::default()
        }
        .gso()
        .map(|g| g.kind)
    };
    assert_eq!(kind(0), None);
    assert_eq!(kind(1), Some(GsoKind::Tcp4));
    assert_eq!(kind(3), Some(GsoKind::Ufo));
    assert_eq!(kind(4), Some(GsoKind::Tcp6));
    assert_eq!(kind(5), Some(GsoKind::Udp));
    assert_eq!(kind(0x84), Some(GsoKind::Tcp6));
    assert_eq!(kind(9), Some(GsoKind::Other(9)));
    // DATA_VALID alone: verified, nothing to do
    let v = VnetHdr {
        flags: VnetHdr::F_DATA_VALID,
        ..VnetHdr::default()
    };
    assert!(v.data_valid() && v.csum().is_none() && v.gso().is_none());
}

#[test]
fn ring_geometry() {
    let d = RingConfig::default();
    assert_eq!((d.block_size, d.blocks, d.vnet_hdr), (1 << 20, 32, false));
    // 64 KiB IP packets plus Ethernet and a VLAN tag fit whole, with the header too.
    assert!(d.largest_frame() >= 65535 + 18);
    let v = RingConfig {
        vnet_hdr: true,
        ..d
    };
    assert_eq!(d.largest_frame() - v.largest_frame(), VnetHdr::LEN);
    assert_eq!(d.largest_frame(), (1 << 20) - 48 - 82);
    let tiny = RingConfig {
        block_size: 100,
        ..d
    };
    assert_eq!(tiny.largest_frame(), 0);
}
