//! TCP segmentation: `multisplit`, `multidisorder`, `fakedsplit`, `fakeddisorder`,
//! `hostfakesplit`, `tcpseg`, each sending the payload (or a blob) in parts in nfqws2's
//! order, with `seqovl` (an overlap of pattern bytes before a part, its sequence number
//! moved back by as much) where nfqws2 applies it.

use super::blobs::{pattern, BlobRef};
use super::markers::{resolve_list, Marker};
use super::{Ctx, Opts, Seqovl, SplitArgs, Verdict};
use crate::payload::Markers;

/// The data to split and the markers it resolves against: the payload, or a blob (against
/// which only absolute markers resolve). None for non-TCP, empty data, a missing blob.
fn data(c: &Ctx, blob: Option<&BlobRef>) -> Option<(Vec<u8>, Markers)> {
    if !c.d.is_tcp() {
        return None;
    }
    let r = match blob {
        Some(b) => (c.blob(b)?, Markers::default()),
        None => (c.d.payload.to_vec(), c.input.markers),
    };
    (!r.0.is_empty()).then_some(r)
}

fn seqovl_bytes(c: &Ctx, s: &SplitArgs, n: usize) -> Vec<u8> {
    // a missing pattern blob gives zeros (nfqws2: with `optional`; else an error)
    let pat = s
        .seqovl_pattern
        .as_ref()
        .and_then(|p| c.blob(p))
        .unwrap_or_else(|| vec![0]);
    pattern(&pat, 0, n)
}

fn drop_or_pass(nodrop: bool) -> Verdict {
    if nodrop {
        Verdict::Pass
    } else {
        Verdict::Drop
    }
}

/// Split positions: resolved, sorted, unique, without 0.
fn split_points(list: &[Marker], data: &[u8], m: &Markers) -> Vec<usize> {
    let mut p = resolve_list(list, data, m);
    p.retain(|&x| x != 0);
    p
}

/// The parts between split points: (start, end).
fn parts(pos: &[usize], len: usize) -> Vec<(usize, usize)> {
    let mut v = Vec::with_capacity(pos.len() + 1);
    let mut start = 0;
    for &p in pos {
        v.push((start, p));
        start = p;
    }
    v.push((start, len));
    v
}

/// `multisplit`: the parts in order; `seqovl=N` puts N pattern bytes before the first.
pub(crate) fn multisplit(c: &mut Ctx, s: &SplitArgs) -> Option<Verdict> {
    let (data, m) = data(c, s.blob.as_ref())?;
    let pos = split_points(&s.pos, &data, &m);
    if pos.is_empty() {
        return None;
    }
    for (i, (a, b)) in parts(&pos, data.len()).into_iter().enumerate() {
        let mut part = data[a..b].to_vec();
        let mut ovl = 0;
        if let (0, Seqovl::Num(n)) = (i, s.seqovl) {
            ovl = n as usize;
            let mut p = seqovl_bytes(c, s, ovl);
            p.extend_from_slice(&part);
            part = p;
        }
        if !c.send_payload(&part, a as i64 - ovl as i64, Opts::FULL) {
            return None;
        }
    }
    Some(drop_or_pass(s.nodrop))
}

/// `multidisorder`: the parts last first; `seqovl=<marker>` (less than the first split
/// point) puts that many pattern bytes before the second part.
pub(crate) fn multidisorder(c: &mut Ctx, s: &SplitArgs) -> Option<Verdict> {
    let (data, m) = data(c, s.blob.as_ref())?;
    let pos = split_points(&s.pos, &data, &m);
    if pos.is_empty() {
        return None;
    }
    let ovl = match s.seqovl {
        Seqovl::Marker(k) => k.resolve(&data, &m).filter(|&o| o < pos[0]).unwrap_or(0),
        Seqovl::Num(n) => Some(n as usize).filter(|&o| o < pos[0]).unwrap_or(0),
        Seqovl::None => 0,
    };
    for (i, (a, b)) in parts(&pos, data.len()).into_iter().enumerate().rev() {
        let mut part = data[a..b].to_vec();
        let mut o = 0;
        if i == 1 && ovl > 0 {
            o = ovl;
            let mut p = seqovl_bytes(c, s, o);
            p.extend_from_slice(&part);
            part = p;
        }
        if !c.send_payload(&part, a as i64 - o as i64, Opts::FULL) {
            return None;
        }
    }
    Some(drop_or_pass(s.nodrop))
}

fn single_pos(s: &SplitArgs, data: &[u8], m: &Markers) -> Option<usize> {
    s.pos.first()?.resolve(data, m).filter(|&p| p > 0)
}

fn fake_pattern(c: &Ctx, s: &SplitArgs) -> Vec<u8> {
    s.pattern
        .as_ref()
        .and_then(|p| c.blob(p))
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| vec![0])
}

/// `fakedsplit`: fake 1st part, real 1st part, fake 1st part, fake 2nd part, real 2nd
/// part, fake 2nd part (`nofake1`..`nofake4` leave fakes out). Fakes are the pattern at
/// their sequence offset, with fooling and repeats; real parts get neither.
pub(crate) fn fakedsplit(c: &mut Ctx, s: &SplitArgs) -> Option<Verdict> {
    let (data, m) = data(c, s.blob.as_ref())?;
    let p = single_pos(s, &data, &m)?;
    let pat = fake_pattern(c, s);
    let fake1 = pattern(&pat, 0, p);
    let fake2 = pattern(&pat, p, data.len() - p);
    if !s.nofake[0] && !c.send_payload(&fake1, 0, Opts::FAKE) {
        return None;
    }
    let ovl = match s.seqovl {
        Seqovl::Num(n) => n as usize,
        _ => 0,
    };
    let mut part = seqovl_bytes(c, s, ovl);
    part.extend_from_slice(&data[..p]);
    if !c.send_payload(&part, -(ovl as i64), Opts::ORIG) {
        return None;
    }
    if !s.nofake[1] && !c.send_payload(&fake1, 0, Opts::FAKE) {
        return None;
    }
    if !s.nofake[2] && !c.send_payload(&fake2, p as i64, Opts::FAKE) {
        return None;
    }
    if !c.send_payload(&data[p..], p as i64, Opts::ORIG) {
        return None;
    }
    if !s.nofake[3] && !c.send_payload(&fake2, p as i64, Opts::FAKE) {
        return None;
    }
    Some(drop_or_pass(s.nodrop))
}

/// `fakeddisorder`: fake 2nd part, real 2nd part, fake 2nd part, fake 1st part, real 1st
/// part, fake 1st part; `seqovl=<marker>` (less than the split point) before the real 2nd
/// part.
pub(crate) fn fakeddisorder(c: &mut Ctx, s: &SplitArgs) -> Option<Verdict> {
    let (data, m) = data(c, s.blob.as_ref())?;
    let p = single_pos(s, &data, &m)?;
    let pat = fake_pattern(c, s);
    let fake1 = pattern(&pat, 0, p);
    let fake2 = pattern(&pat, p, data.len() - p);
    if !s.nofake[0] && !c.send_payload(&fake2, p as i64, Opts::FAKE) {
        return None;
    }
    let ovl = match s.seqovl {
        Seqovl::Marker(k) => k.resolve(&data, &m).filter(|&o| o < p).unwrap_or(0),
        Seqovl::Num(n) => Some(n as usize).filter(|&o| o < p).unwrap_or(0),
        Seqovl::None => 0,
    };
    let mut part = seqovl_bytes(c, s, ovl);
    part.extend_from_slice(&data[p..]);
    if !c.send_payload(&part, p as i64 - ovl as i64, Opts::ORIG) {
        return None;
    }
    if !s.nofake[1] && !c.send_payload(&fake2, p as i64, Opts::FAKE) {
        return None;
    }
    if !s.nofake[2] && !c.send_payload(&fake1, 0, Opts::FAKE) {
        return None;
    }
    if !c.send_payload(&data[..p], 0, Opts::ORIG) {
        return None;
    }
    if !s.nofake[3] && !c.send_payload(&fake1, 0, Opts::FAKE) {
        return None;
    }
    Some(drop_or_pass(s.nodrop))
}

/// `tcpseg`: the part between two markers (both inclusive; an unresolved first is 0, an
/// unresolved second the last byte), sent with options; the original passes.
pub(crate) fn tcpseg(c: &mut Ctx, s: &SplitArgs) -> Option<Verdict> {
    let (data, m) = data(c, s.blob.as_ref())?;
    let (a, b) = (s.pos.first()?, s.pos.get(1)?);
    let (a, b) = match (a.resolve(&data, &m), b.resolve(&data, &m)) {
        (None, None) => return None,
        (a, b) => (a.unwrap_or(0), b.unwrap_or(data.len() - 1)),
    };
    if a > b {
        return None;
    }
    let ovl = match s.seqovl {
        Seqovl::Num(n) => n as usize,
        _ => 0,
    };
    let mut part = seqovl_bytes(c, s, ovl);
    part.extend_from_slice(&data[a..=b]);
    c.send_payload(&part, a as i64 - ovl as i64, Opts::FULL)
        .then_some(Verdict::Pass)
}

/// `hostfakesplit`'s arguments.
pub(crate) struct HostFake<'a> {
    pub host: Option<&'a str>,
    pub midhost: Option<Marker>,
    pub disorder_after: Option<Marker>,
    pub nofake: [bool; 2],
    pub blob: Option<&'a BlobRef>,
    pub optional: bool,
    pub nodrop: bool,
}

/// A fake host name of `len` bytes: the end of `template`, or random letters and digits
/// ending in `.template` (or a random TLD), as nfqws2's `genhost`.
fn genhost(c: &mut Ctx, len: usize, template: Option<&str>) -> Vec<u8> {
    const AZ: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
    const AZ09: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rnd = |set: &[u8], n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| set[(c.random() % set.len() as u64) as usize])
            .collect()
    };
    match template.filter(|t| !t.is_empty()) {
        Some(t) => {
            let t = t.as_bytes();
            if len <= t.len() {
                t[t.len() - len..].to_vec()
            } else if len == t.len() + 1 {
                [b".", t].concat()
            } else {
                let mut v = rnd(AZ, 1);
                v.extend(rnd(AZ09, len - t.len() - 2));
                v.push(b'.');
                v.extend_from_slice(t);
                v
            }
        }
        None if len >= 7 => {
            let tlds: [&[u8]; 6] = [b"com", b"org", b"net", b"edu", b"gov", b"biz"];
            let tld = tlds[(rnd(AZ09, 1)[0] as usize) % tlds.len()];
            let mut v = rnd(AZ, 1);
            v.extend(rnd(AZ09, len - tld.len() - 2));
            v.push(b'.');
            v.extend_from_slice(tld);
            v
        }
        None => {
            let mut v = rnd(AZ, 1);
            v.extend(rnd(AZ09, len.saturating_sub(1)));
            v
        }
    }
}

/// `hostfakesplit`: real part before the host, fake host, real host (in two at `midhost`),
/// fake host, real rest (in two, last first, at `disorder_after`).
pub(crate) fn hostfakesplit(c: &mut Ctx, h: &HostFake) -> Option<Verdict> {
    let _ = h.optional;
    let (data, m) = data(c, h.blob)?;
    let host = Marker::parse("host")?.resolve(&data, &m)?;
    let last = Marker::parse("endhost-1")?.resolve(&data, &m)?;
    if host > last {
        return None;
    }
    if !c.send_payload(&data[..host], 0, Opts::ORIG) {
        return None;
    }
    let fake = genhost(c, last - host + 1, h.host);
    if !h.nofake[0] && !c.send_payload(&fake, host as i64, Opts::FAKE) {
        return None;
    }
    let mid = h
        .midhost
        .and_then(|k| k.resolve(&data, &m))
        .filter(|&x| x > host && x <= last);
    if let Some(mid) = mid {
        if !c.send_payload(&data[host..mid], host as i64, Opts::ORIG)
            || !c.send_payload(&data[mid..=last], mid as i64, Opts::ORIG)
        {
            return None;
        }
    } else if !c.send_payload(&data[host..=last], host as i64, Opts::ORIG) {
        return None;
    }
    if !h.nofake[1] && !c.send_payload(&fake, host as i64, Opts::FAKE) {
        return None;
    }
    let after = last + 1;
    let dis = h
        .disorder_after
        .and_then(|k| k.resolve(&data, &m))
        .filter(|&x| x > after);
    match dis {
        Some(d) => {
            if !c.send_payload(&data[d..], d as i64, Opts::ORIG)
                || !c.send_payload(&data[after..d], after as i64, Opts::ORIG)
            {
                return None;
            }
        }
        None => {
            if !c.send_payload(&data[after..], after as i64, Opts::ORIG) {
                return None;
            }
        }
    }
    Some(drop_or_pass(h.nodrop))
}
