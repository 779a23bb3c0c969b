//! `PacketMeta::parse` and `get` of every field, on both link types, must never panic; the
//! quoted packet of an ICMP error and the payload bounds too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_wire::{Field, LinkType, PacketMeta};

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
    }
});
