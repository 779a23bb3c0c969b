//! Reading an arbitrary file as a capture must give packets or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(cap) = weir_wire::pcap::read_bytes(data) {
        for p in &cap.packets {
            let _ = weir_wire::PacketMeta::parse(&p.data, p.link);
        }
    }
});
