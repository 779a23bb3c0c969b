//! Direct fakes: `fake` (a blob sent with the original's headers and the fooling options
//! before the original passes), `rst` (an empty RST or RST,ACK) and `syndata` (the SYN sent
//! with a payload instead of the original).

use super::blobs::BlobRef;
use super::tcp::Seg;
use super::{Ctx, Opts, Verdict};

const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// `fake`: send the blob (cut by MSS for TCP), then pass the original.
pub(crate) fn fake(c: &mut Ctx, blob: &BlobRef, _optional: bool) -> Option<Verdict> {
    if c.d.payload.is_empty() {
        return None;
    }
    // a missing blob is skipped, `optional` or not (nfqws2 stops with an error)
    let data = c.blob(blob)?;
    if data.is_empty() {
        return None;
    }
    c.send_payload(&data, 0, Opts::FULL)
        .then_some(Verdict::Pass)
}

/// `rst`: an empty RST (`rstack`: RST,ACK) with the original's sequence numbers.
pub(crate) fn rst(c: &mut Ctx, rstack: bool) -> Option<Verdict> {
    if !c.d.is_tcp() || c.d.payload.is_empty() {
        return None;
    }
    let mut s = Seg::from(&c.d);
    s.payload.clear();
    s.set_flags(RST | if rstack { ACK } else { 0 });
    c.send_seg(s, &[], Opts::FULL).then_some(Verdict::Pass)
}

/// `syndata`: a SYN (without ACK) sent with the blob (16 zero bytes by default) as its
/// payload, instead of the original.
pub(crate) fn syndata(c: &mut Ctx, blob: Option<&BlobRef>) -> Option<Verdict> {
    if !c.d.is_tcp() || c.d.tcp_flags() & (SYN | ACK) != SYN {
        return None;
    }
    let data = match blob {
        Some(b) => c.blob(b)?,
        None => vec![0; 16],
    };
    // one packet, not cut by MSS
    let mut s = Seg::from(&c.d);
    c.common.fooling.apply(&mut s, c.input.incoming_ttl);
    s.badsum = c.common.badsum;
    s.payload = data;
    if !c.emit(s, Opts::FULL) {
        return None;
    }
    Some(Verdict::Drop)
}
