//! `PacketMeta::parse` and `get` of every field, on both link types, must never panic; the
//! quoted packet of an ICMP error and the payload bounds too; and cutting an IPv4 packet into
//! fragments (`fragment_ipv4`) keeps every byte of its payload, each piece within the MTU.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_wire::frag::fragment_ipv4;
use weir_wire::{Field, LinkType, PacketMeta, L3};

fuzz_target!(|data: &[u8]| {
    for link in [LinkType::Ethernet, LinkType::RawIp] {
        let m = PacketMeta::parse(data, link);
        for f in Field::ALL {
            let _ = m.get(data, *f);
        }
        if let Some((off, len)) = m.payload(data) {
            assert!(off + len <= data.len());
        }
        if m.l3_ok() {
            assert!(m.l3_end() <= data.len());
        }
        if let Some(q) = m.icmp_quoted(data) {
            for f in Field::ALL {
                let _ = q.get(data, *f);
            }
        }
        let _ = m.ipv4_checksum_ok(data);
        // cutting it for a smaller MTU: every piece fits, the payload is all there
        if m.l3 == L3::Ipv4 {
            let l3 = m.l3_off as usize;
            for mtu in [68, 576, 1280] {
                if let Some(pieces) = fragment_ipv4(data, l3, mtu) {
                    let mut total = 0;
                    for p in &pieces {
                        assert!(p.len() <= l3 + mtu);
                        let hl = ((p[l3] & 15) as usize) * 4;
                        let len = u16::from_be_bytes([p[l3 + 2], p[l3 + 3]]) as usize;
                        assert_eq!(len, p.len() - l3);
                        total += len - hl;
                        let _ = PacketMeta::parse(p, link);
                    }
                    let hl = ((data[l3] & 15) as usize) * 4;
                    let tot = u16::from_be_bytes([data[l3 + 2], data[l3 + 3]]) as usize;
                    assert_eq!(total, tot - hl);
                }
            }
        }
    }
});
