//! The small actions: `wsize` (window size and scale of a SYN,ACK), `udplen` (a UDP payload
//! made longer or shorter), `ipfrag` (the packet sent as two IP fragments), `send` (a copy
//! sent with the options) and `pktmod` (the options applied to the packet itself).

use super::blobs::{pattern, BlobRef};
use super::tcp::Seg;
use super::{Ctx, IpId, Opts, Verdict};

/// `wsize`: on a SYN,ACK, set the window to `wsize` and lower the window scale option to
/// `scale` (never raise it). Modify if anything changed.
pub(crate) fn wsize(c: &mut Ctx, wsize: Option<u16>, scale: Option<u8>) -> Option<Verdict> {
    if !c.d.is_tcp() || c.d.tcp_flags() & 0x12 != 0x12 {
        return None;
    }
    let mut s = Seg::from(&c.d);
    let mut changed = false;
    if let Some(w) = wsize {
        s.set_window(w);
        changed = true;
    }
    if let Some(sc) = scale {
        if let Some(mut opts) = s.options() {
            if let Some(o) = opts.iter_mut().find(|o| o[0] == 3 && o.len() == 3) {
                if sc < o[2] {
                    o[2] = sc;
                    changed = true;
                }
            }
            s.set_options(&opts);
        }
    }
    if !changed {
        return None;
    }
    c.modified = Some(s.build()?);
    Some(Verdict::Modify)
}

/// `udplen`: grow the UDP payload by `inc` bytes of the pattern (from `pat_off` into it), or
/// shrink it (never to nothing). Payloads shorter than `min` or longer than `max` are left.
pub(crate) fn udplen(
    c: &mut Ctx,
    min: Option<usize>,
    max: Option<usize>,
    inc: i32,
    pat: Option<&BlobRef>,
    pat_off: usize,
) -> Option<Verdict> {
    if c.d.is_tcp() {
        return None;
    }
    let len = c.d.payload.len();
    if min.is_some_and(|m| len < m) || max.is_some_and(|m| len > m) || inc == 0 {
        return None;
    }
    let mut s = Seg::from(&c.d);
    if inc > 0 {
        let p = pat.and_then(|p| c.blob(p)).unwrap_or_else(|| vec![0]);
        s.payload.extend(pattern(&p, pat_off, inc as usize));
    } else {
        let keep = len
            .checked_sub(inc.unsigned_abs() as usize)
            .filter(|&k| k >= 1)?;
        s.payload.truncate(keep);
    }
    c.modified = Some(s.build()?);
    Some(Verdict::Modify)
}

/// `ipfrag`: send the packet (with the options) as two IP fragments and drop the
/// original; pass it when it is too short to cut at the position.
pub(crate) fn ipfrag(c: &mut Ctx) -> Option<Verdict> {
    let s = Seg::from(&c.d);
    let payload = s.payload.clone();
    let before = c.out.len();
    let copies = c.common.repeats.max(1) as usize;
    if !c.send_seg(s, &payload, Opts::FULL) || c.out.len() - before < 2 * copies {
        return None;
    }
    Some(Verdict::Drop)
}

/// `send`: a copy of the packet with the options applied is sent; the original passes.
pub(crate) fn send(c: &mut Ctx) -> Option<Verdict> {
    let s = Seg::from(&c.d);
    let payload = s.payload.clone();
    c.send_seg(s, &payload, Opts::FULL).then_some(Verdict::Pass)
}

/// `pktmod`: the fooling and ip_id options applied to the packet itself.
pub(crate) fn pktmod(c: &mut Ctx) -> Option<Verdict> {
    let mut s = Seg::from(&c.d);
    c.common.fooling.apply(&mut s, c.input.incoming_ttl);
    s.badsum = c.common.badsum;
    match c.common.ip_id {
        IpId::Zero => s.set_ip_id(0),
        IpId::Rnd => {
            let r = (c.random() as u16).max(1);
            s.set_ip_id(r)
        }
        IpId::Seq => {
            let id = s.ip_id().unwrap_or(0).wrapping_add(1);
            s.set_ip_id(id)
        }
        IpId::None => {}
    }
    c.modified = Some(s.build()?);
    Some(Verdict::Modify)
}
