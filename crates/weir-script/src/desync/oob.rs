//! `oob` (nfqws2's `oob`, tpws's `--oob`): one byte of TCP urgent data slipped into the
//! connection's first data segment. The client's sequence numbers are shifted down by one
//! from its SYN on, so the extra byte takes the place the SYN's shifted number left free and
//! the connection's numbers agree again after it; the server's acknowledgements are shifted
//! up by one until then. The receiving socket takes the urgent byte out of band: the server
//! application reads the data unchanged, a DPI that does not know urgent data sees a
//! different stream.
//!
//! It needs the connection from its SYN ([`super::FlowPos::from_syn`]) and is done for a
//! direction once the first data segment is past (it asks for its cutoff).

use super::markers::Marker;
use super::tcp::Seg;
use super::{Ctx, Opts, Verdict};

/// Where the urgent byte goes (`urp=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Urp {
    /// `b` (the default): before the data; the urgent pointer 0.
    Begin,
    /// `e`: after the data.
    End,
    /// A marker: before the byte it resolves to.
    At(Marker),
}

/// TCP flags.
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const URG: u8 = 0x20;

pub(crate) fn oob(c: &mut Ctx, byte: u8, urp: Urp) -> Option<Verdict> {
    if !c.d.is_tcp() || !c.pos.from_syn {
        // (nfqws2: "must be applied since the very beginning of the tcp connection")
        c.cutoff = true;
        return None;
    }
    let mut s = Seg::from(&c.d);
    if !c.pos.outgoing {
        // the server acknowledges one less than the client counts until the urgent byte
        if c.pos.reverse_seq > 1 {
            c.cutoff = true;
            return None;
        }
        s.set_ack(s.ack().wrapping_add(1));
        c.modified = Some(s.build()?);
        return Some(Verdict::Modify);
    }
    let pos = c.pos.own_seq;
    if pos > 1 {
        c.cutoff = true;
        return None;
    }
    s.set_seq(s.seq().wrapping_sub(1));
    let data = c.d.payload;
    if pos == 0 || data.is_empty() {
        // the SYN, or an empty ACK before the data: shifted only
        if pos == 0 && s.flags() & (SYN | ACK) != SYN {
            c.cutoff = true;
            return None;
        }
        c.modified = Some(s.build()?);
        return Some(Verdict::Modify);
    }
    // the first data: the urgent byte inserted at urp (1-based: before data[urp - 1])
    let (at, pointer) = match urp {
        Urp::Begin => (1, 0u16),
        Urp::End => (data.len() + 1, (data.len() + 1) as u16),
        Urp::At(m) => {
            let Some(o) = m
                .resolve(data, &c.input.markers)
                .filter(|&o| o <= data.len())
            else {
                c.cutoff = true;
                return None;
            };
            (o + 1, (o + 1) as u16)
        }
    };
    let mut payload = Vec::with_capacity(data.len() + 1);
    payload.extend_from_slice(&data[..at - 1]);
    payload.push(byte);
    payload.extend_from_slice(&data[at - 1..]);
    s.set_flags(s.flags() | URG);
    s.set_urgent(pointer);
    c.cutoff = true;
    c.send_seg(s, &payload, Opts::FULL).then_some(Verdict::Drop)
}
