//! The TCP tracker: the state table and window checks of Linux `nf_conntrack_proto_tcp.c`.
//!
//! # What it models
//!
//! A firewall in the middle cannot know the endpoints' state; it guesses the state of the
//! current sender from the flags it sees (`tcp_conntracks` in Linux, [`TABLE`] here) and checks
//! that each segment lies within the windows it has seen advertised (Guido van Rooij's
//! "Real Stateful TCP Packet Filtering", as Linux does):
//!
//! ```text
//!   end    = max(seq + len) seen from a side
//!   maxend = max(ack + max(win, 1)) seen from the other side   (upper bound for seq)
//!   maxwin = max(max(win, 1) + (sack - ack)) seen from a side   (receive window size)
//!
//!   I.   seq  <= sender.maxend                      else invalid ("SEQ over upper bound")
//!   III. sack <= receiver.end                       else invalid ("ACK over upper bound")
//!   II.  seq + len >= sender.end - receiver.maxwin  else ignored (retransmission of ACKed data)
//!   IV.  sack >= receiver.end - max(66000, sender.maxwin)   else ignored (overly delayed ACK)
//! ```
//!
//! Window scaling (RFC 7323) is honoured when both SYNs carry the option; SACK blocks raise the
//! acknowledged edge when the receiver permitted SACK. As in Linux 6.x, segments failing II or IV
//! are *ignored* (accepted as part of the connection without changing it) rather than invalid.
//!
//! The per-connection state ([`TcpConn`]) is kept small (47 bytes) so that an IPv4 entry fits in
//! 112 bytes; the retransmission counter of Linux (`nf_conntrack_tcp_max_retrans`) and the
//! zero-window timeout are left out for that reason.

use std::time::Duration;

use crate::Timeouts;

/// TCP connection states, numbered as in Linux (`TCP_CONNTRACK_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TcpState {
    None = 0,
    SynSent = 1,
    SynRecv = 2,
    Established = 3,
    FinWait = 4,
    CloseWait = 5,
    LastAck = 6,
    TimeWait = 7,
    Close = 8,
    /// SYN seen from both sides (simultaneous open).
    SynSent2 = 9,
}

impl TcpState {
    const ALL: [TcpState; 10] = [
        TcpState::None,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::Established,
        TcpState::FinWait,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::SynSent2,
    ];

    /// The name `conntrack -L` prints (`ESTABLISHED`, `TIME_WAIT`, ...).
    pub fn name(self) -> &'static str {
        [
            "NONE",
            "SYN_SENT",
            "SYN_RECV",
            "ESTABLISHED",
            "FIN_WAIT",
            "CLOSE_WAIT",
            "LAST_ACK",
            "TIME_WAIT",
            "CLOSE",
            "SYN_SENT2",
        ][self as usize]
    }

    /// States in which Linux lets `early_drop` evict even an assured entry (closing ones).
    pub fn can_early_drop(self) -> bool {
        matches!(
            self,
            TcpState::FinWait
                | TcpState::LastAck
                | TcpState::TimeWait
                | TcpState::Close
                | TcpState::CloseWait
        )
    }
}

// Table cells: states 0..=9, then invalid and ignore.
const IV: u8 = 10;
const IG: u8 = 11;
const NO: u8 = 0;
const SS: u8 = 1;
const SR: u8 = 2;
const ES: u8 = 3;
const FW: u8 = 4;
const CW: u8 = 5;
const LA: u8 = 6;
const TW: u8 = 7;
const CL: u8 = 8;
const S2: u8 = 9;

/// Which of RST / SYN / FIN / ACK a segment carries, in Linux's order of precedence.
pub(crate) const I_SYN: u8 = 0;
pub(crate) const I_SYNACK: u8 = 1;
pub(crate) const I_FIN: u8 = 2;
pub(crate) const I_ACK: u8 = 3;
pub(crate) const I_RST: u8 = 4;
pub(crate) const I_NONE: u8 = 5;

/// `TABLE[dir][index][old_state]` = new state (or `IV` / `IG`), as Linux 6.x `tcp_conntracks`.
#[rustfmt::skip]
pub(crate) const TABLE: [[[u8; 10]; 6]; 2] = [
    [
        //           sNO sSS sSR sES sFW sCW sLA sTW sCL sS2
        /* syn    */ [SS, SS, IG, IG, IG, IG, IG, SS, SS, S2],
        /* synack */ [IV, IV, SR, IV, IV, IV, IV, IV, IV, SR],
        /* fin    */ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [ES, IV, ES, ES, CW, CW, TW, TW, CL, IV],
        /* rst    */ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
    [
        //           sNO sSS sSR sES sFW sCW sLA sTW sCL sS2
        /* syn    */ [IV, S2, IV, IV, IV, IV, IV, SS, IV, S2],
        /* synack */ [IV, SR, IG, IG, IG, IG, IG, IG, IG, SR],
        /* fin    */ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [IV, IG, SR, ES, CW, CW, TW, TW, CL, IG],
        /* rst    */ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
];

/// TCP flag bits.
pub(crate) const FIN: u8 = 0x01;
pub(crate) const SYN: u8 = 0x02;
pub(crate) const RST: u8 = 0x04;
pub(crate) const PSH: u8 = 0x08;
pub(crate) const ACK: u8 = 0x10;
pub(crate) const URG: u8 = 0x20;
pub(crate) const ECE: u8 = 0x40;
pub(crate) const CWR: u8 = 0x80;

/// Per-direction flags (`IP_CT_TCP_FLAG_*`).
pub mod dir_flags {
    /// The side sent the window scale option.
    pub const WINDOW_SCALE: u8 = 0x01;
    /// The side sent SACK-permitted.
    pub const SACK_PERM: u8 = 0x02;
    /// The side sent the first FIN.
    pub const CLOSE_INIT: u8 = 0x04;
    /// Window checks are skipped for this side (mid-stream pick-up).
    pub const BE_LIBERAL: u8 = 0x08;
    /// The side has sent data not yet acknowledged.
    pub const DATA_UNACKNOWLEDGED: u8 = 0x10;
    /// `maxack` holds a value.
    pub const MAXACK_SET: u8 = 0x20;
}
use dir_flags::*;

// `last_flags` bits beyond WINDOW_SCALE / SACK_PERM.
const EXP_CHALLENGE_ACK: u8 = 0x40;
const SIMOPEN: u8 = 0x80;
// `last_flags` bit 0x10: direction of the last packet is reply.
const LAST_DIR_REPLY: u8 = 0x10;

/// Valid flag combinations once PSH, ECE and CWR are masked (Linux `tcp_valid_flags`).
pub(crate) fn flags_valid(flags: u8) -> bool {
    let f = flags & !(ECE | CWR | PSH);
    matches!(
        f,
        x if x == SYN
            || x == SYN | URG
            || x == SYN | ACK
            || x == RST
            || x == RST | ACK
            || x == FIN | ACK
            || x == FIN | ACK | URG
            || x == ACK
            || x == ACK | URG
    )
}

pub(crate) fn index_of(flags: u8) -> u8 {
    if flags & RST != 0 {
        I_RST
    } else if flags & SYN != 0 {
        if flags & ACK != 0 {
            I_SYNACK
        } else {
            I_SYN
        }
    } else if flags & FIN != 0 {
        I_FIN
    } else if flags & ACK != 0 {
        I_ACK
    } else {
        I_NONE
    }
}

#[inline]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
#[inline]
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// What the tracker needs of one segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg<'a> {
    pub seq: u32,
    pub ack: u32,
    pub win: u16,
    pub flags: u8,
    /// seq + payload length + SYN + FIN.
    pub end: u32,
    /// Option bytes (after the 20-byte header).
    pub opts: &'a [u8],
    /// The shift a helper's payload rewrite made in the other direction's sequence numbers:
    /// `ack` and SACK edges are read less this (Linux `nf_ct_seq_offset` in `tcp_in_window`).
    pub ack_off: u32,
}

impl<'a> Seg<'a> {
    /// Read from the TCP header at `th` (complete, options included); `seg_len` is the length
    /// of header + payload.
    pub fn parse(th: &'a [u8], seg_len: usize) -> Option<Seg<'a>> {
        if th.len() < 20 {
            return None;
        }
        let seq = u32::from_be_bytes([th[4], th[5], th[6], th[7]]);
        let ack = u32::from_be_bytes([th[8], th[9], th[10], th[11]]);
        let doff = (th[12] >> 4) as usize * 4;
        let flags = th[13];
        let win = u16::from_be_bytes([th[14], th[15]]);
        let opts = th.get(20..doff.max(20))?;
        let payload = seg_len.saturating_sub(doff) as u32;
        let end = seq
            .wrapping_add(payload)
            .wrapping_add((flags & SYN != 0) as u32)
            .wrapping_add((flags & FIN != 0) as u32);
        Some(Seg {
            seq,
            ack,
            win,
            flags,
            end,
            opts,
            ack_off: 0,
        })
    }
}

/// Walk TCP options: window scale (capped at 14) and SACK-permitted.
fn parse_options(opts: &[u8]) -> (u8, u8) {
    let (mut scale, mut flags) = (0u8, 0u8);
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&size) = opts.get(i + 1) else { break };
                let size = size as usize;
                if size < 2 || i + size > opts.len() {
                    break;
                }
                if kind == 4 && size == 2 {
                    flags |= SACK_PERM;
                } else if kind == 3 && size == 3 {
                    scale = opts[i + 2].min(14);
                    flags |= WINDOW_SCALE;
                }
                i += size;
            }
        }
    }
    (scale, flags)
}

/// The highest right edge of the SACK blocks, if beyond `sack`.
fn sack_edge(opts: &[u8], mut sack: u32) -> u32 {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&size) = opts.get(i + 1) else { break };
                let size = size as usize;
                if size < 2 || i + size > opts.len() {
                    break;
                }
                if kind == 5 && size >= 10 && (size - 2) % 8 == 0 {
                    let mut b = i + 2;
                    while b + 8 <= i + size {
                        let r = u32::from_be_bytes([
                            opts[b + 4],
                            opts[b + 5],
                            opts[b + 6],
                            opts[b + 7],
                        ]);
                        if after(r, sack) {
                            sack = r;
                        }
                        b += 8;
                    }
                    return sack;
                }
                i += size;
            }
        }
    }
    sack
}

/// TCP tracking state of one connection (Linux `struct ip_ct_tcp`, minus retransmission
/// counting). Index `0` is the original direction, `1` the reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct TcpConn {
    /// The entry's protocol and status bits: kept here, first, so that they share the
    /// struct's padding and the cache line of the entry's tuple.
    pub(crate) ct_proto: u8,
    pub(crate) ct_status: u8,
    last_win: u16,
    /// `td_end`: highest seq + len sent.
    pub end: [u32; 2],
    /// `td_maxend`: highest right edge of the peer's window.
    pub maxend: [u32; 2],
    /// `td_maxwin`: largest window seen.
    pub maxwin: [u32; 2],
    /// `td_maxack`: highest ACK sent (valid with `MAXACK_SET`).
    pub maxack: [u32; 2],
    /// seq + len of the last ignored segment or in-window ACK.
    last_end: u32,
    /// `td_scale`: window scale shift.
    pub scale: [u8; 2],
    /// [`dir_flags`] per direction.
    pub flags: [u8; 2],
    /// State (low 4 bits) and last flag index (high 4 bits).
    state_idx: u8,
    last_wscale: u8,
    last_flags: u8,
    /// The entry's timeout policy (`ct timeout set`: index + 1 into the table's policies; 0:
    /// the configured timeouts), kept in the struct's last spare byte.
    pub(crate) policy: u8,
}

/// What to do with a segment of a tracked connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TcpVerdict {
    /// In window: state updated; refresh with this timeout. `kill`: remove the entry after
    /// accounting (RST answering a connection that never saw a reply).
    Accept {
        timeout: Duration,
        kill: bool,
        set_assured: bool,
    },
    /// Part of the connection but changes nothing (Linux `NFCT_TCP_IGNORE` / `sIG`).
    Ignore,
    /// SYN re-opening a closed connection: remove the entry and track the packet as new.
    Reopen,
    Invalid(crate::Invalid),
}

enum Win {
    Accept,
    Ignore,
    Invalid(crate::Invalid),
}

impl TcpConn {
    pub(crate) fn with_header(proto: u8, status: u8) -> TcpConn {
        TcpConn {
            ct_proto: proto,
            ct_status: status,
            ..TcpConn::default()
        }
    }

    pub fn state(&self) -> TcpState {
        TcpState::ALL[(self.state_idx & 0x0f) as usize % 10]
    }
    fn set_state(&mut self, s: u8) {
        self.state_idx = (self.state_idx & 0xf0) | s;
    }
    fn last_index(&self) -> u8 {
        self.state_idx >> 4
    }
    fn last_dir(&self) -> usize {
        (self.last_flags & LAST_DIR_REPLY != 0) as usize
    }
    fn set_last(&mut self, index: u8, dir: usize) {
        self.state_idx = (self.state_idx & 0x0f) | (index << 4);
        if dir == 1 {
            self.last_flags |= LAST_DIR_REPLY;
        } else {
            self.last_flags &= !LAST_DIR_REPLY;
        }
    }

    /// Linux `tcp_new`: set up tracking for the first segment of a connection. `Err` when the
    /// segment may not create one.
    pub(crate) fn new_conn(seg: &Seg, loose: bool) -> Result<TcpConn, crate::Invalid> {
        let index = index_of(seg.flags);
        let ns = TABLE[0][index as usize][NO as usize];
        if ns >= IV {
            return Err(crate::Invalid::CannotCreate);
        }
        let mut c = TcpConn::default();
        c.end[0] = seg.end;
        c.maxwin[0] = (seg.win as u32).max(1);
        if ns == SS {
            c.maxend[0] = seg.end;
            let (scale, flags) = parse_options(seg.opts);
            c.scale[0] = scale;
            c.flags[0] = flags;
        } else if !loose {
            return Err(crate::Invalid::CannotCreate);
        } else {
            c.maxend[0] = seg.end.wrapping_add(c.maxwin[0]);
            c.flags = [SACK_PERM | BE_LIBERAL; 2];
        }
        c.state_idx = I_NONE << 4;
        Ok(c)
    }

    fn init_sender(&mut self, d: usize, seg: &Seg) {
        let r = 1 - d;
        self.end[d] = seg.end;
        self.maxend[d] = seg.end;
        self.maxwin[d] = (seg.win as u32).max(1);
        let (scale, flags) = parse_options(seg.opts);
        self.scale[d] = scale;
        self.flags[d] = (self.flags[d] & BE_LIBERAL) | flags;
        if !(self.flags[d] & WINDOW_SCALE != 0 && self.flags[r] & WINDOW_SCALE != 0) {
            self.scale[d] = 0;
            self.scale[r] = 0;
        }
    }

    /// Linux's `last_ack`, kept only for the case that reads it: the ACK number of a reply
    /// ACK ignored in SYN_SENT. It lives in the reply side's `maxack`, unused until that side
    /// is tracked (`MAXACK_SET` clear; `maxack` is written before it is set), so the entry
    /// stays 48 bytes.
    fn set_challenge_ack(&mut self, ack: u32) {
        if self.flags[1] & MAXACK_SET == 0 {
            self.maxack[1] = ack;
        }
    }

    fn challenge_ack(&self) -> Option<u32> {
        (self.flags[1] & MAXACK_SET == 0).then_some(self.maxack[1])
    }

    fn annotate_ignored(&mut self, seg: &Seg, index: u8, d: usize) {
        self.set_last(index, d);
        self.last_end = seg.end;
        self.last_win = seg.win;
        if index == I_SYN && d == 0 {
            let (scale, flags) = parse_options(seg.opts);
            self.last_flags = (self.last_flags & !(WINDOW_SCALE | SACK_PERM)) | flags;
            self.last_wscale = if flags & WINDOW_SCALE != 0 { scale } else { 0 };
        }
    }

    /// Linux `tcp_in_window`.
    fn in_window(&mut self, d: usize, index: u8, seg: &Seg, liberal_cfg: bool) -> Win {
        use crate::Invalid as I;
        let r = 1 - d;
        let state = self.state_idx & 0x0f;
        let mut seq = seg.seq;
        let mut ack = seg.ack.wrapping_sub(seg.ack_off);
        let mut sack = ack;
        let mut end = seg.end;
        let mut win = seg.win as u32;
        let syn = seg.flags & SYN != 0;
        let has_ack = seg.flags & ACK != 0;
        let rst = seg.flags & RST != 0;
        if self.flags[r] & SACK_PERM != 0 {
            sack = sack_edge(seg.opts, seg.ack).wrapping_sub(seg.ack_off);
        }

        if self.maxwin[d] == 0 {
            if syn {
                self.init_sender(d, seg);
                if !has_ack {
                    // Simultaneous open.
                    return Win::Accept;
                }
            } else {
                // Mid-stream: use what this packet says.
                self.end[d] = end;
                let swin = win << self.scale[d];
                self.maxwin[d] = swin.max(1);
                self.maxend[d] = end.wrapping_add(self.maxwin[d]);
                if self.maxwin[r] == 0 {
                    self.end[r] = sack;
                    self.maxend[r] = sack;
                }
            }
        } else if syn && ((d == 0 && state == SS) || (d == 1 && state == SR)) {
            if after(end, self.end[d]) {
                // A re-initialised TCP uses higher sequence numbers (RFC 793).
                self.init_sender(d, seg);
                if d == 1 && !has_ack {
                    return Win::Accept;
                }
            } else if before(end, self.end[d]) && d == 0 && !has_ack {
                self.annotate_ignored(seg, index, d);
                return Win::Ignore;
            }
        }

        if !has_ack || (rst && ack == 0) {
            ack = self.end[r];
            sack = ack;
        }
        if rst && seq == 0 && state == SS {
            // A RST answering a SYN. (Old kernels also let any segment without data through
            // on its ACK alone; current ones check its sequence number like any other, which
            // the kernel lab confirms: an empty segment far out of the window is invalid.)
            seq = self.end[d];
            end = seq;
        }
        let liberal = liberal_cfg || self.flags[d] & BE_LIBERAL != 0;
        let fail = |v: Win| if liberal { Win::Accept } else { v };

        if !before(seq, self.maxend[d].wrapping_add(1)) {
            return fail(Win::Invalid(I::SeqOverWindow));
        }
        if !before(sack, self.end[r].wrapping_add(1)) {
            return fail(Win::Invalid(I::AckOverWindow));
        }
        let in_recv_win = self.maxwin[r] == 0
            || after(
                end,
                self.end[d].wrapping_sub(self.maxwin[r]).wrapping_sub(1),
            );
        if !in_recv_win {
            return fail(Win::Ignore);
        }
        let maxackwin = self.maxwin[d].max(66000);
        if !after(sack, self.end[r].wrapping_sub(maxackwin).wrapping_sub(1)) {
            return fail(Win::Ignore);
        }

        if !syn {
            win <<= self.scale[d];
        }
        let swin = win.wrapping_add(sack.wrapping_sub(ack));
        if self.maxwin[d] < swin {
            self.maxwin[d] = swin;
        }
        if after(end, self.end[d]) {
            self.end[d] = end;
            self.flags[d] |= DATA_UNACKNOWLEDGED;
        }
        if has_ack {
            if self.flags[d] & MAXACK_SET == 0 {
                self.maxack[d] = ack;
                self.flags[d] |= MAXACK_SET;
            } else if after(ack, self.maxack[d]) {
                self.maxack[d] = ack;
            }
        }
        if self.maxwin[r] != 0 && after(end, self.maxend[d]) {
            self.maxwin[r] = self.maxwin[r].wrapping_add(end.wrapping_sub(self.maxend[d]));
        }
        if after(sack.wrapping_add(win), self.maxend[r].wrapping_sub(1)) {
            self.maxend[r] = sack.wrapping_add(win);
            if win == 0 {
                self.maxend[r] = self.maxend[r].wrapping_add(1);
            }
        }
        if ack == self.end[r] {
            self.flags[r] &= !DATA_UNACKNOWLEDGED;
        }
        if index == I_ACK {
            self.last_end = end;
            self.last_win = win.min(u16::MAX as u32) as u16;
        }
        Win::Accept
    }

    /// Linux's exception for a SYN proxy's connection (`nf_conntrack_tcp_packet`): while the
    /// server has not answered the proxy's SYN, the client (established with the proxy) may
    /// send a keep-alive or a zero-window probe, an ACK one before its next sequence number.
    /// It belongs to the connection, unchanged, so that the proxy sends the SYN again.
    pub(crate) fn synproxy_keepalive(&self, d: usize, seg: &Seg) -> bool {
        d == 0
            && self.state() == TcpState::SynSent
            && index_of(seg.flags) == I_ACK
            && self.last_dir() == 0
            && self.end[0].wrapping_sub(1) == seg.seq
    }

    /// Linux `nf_conntrack_tcp_packet` for a segment in direction `d` (0 original, 1 reply).
    /// `seen_reply` / `assured` are the entry's status before this packet.
    pub(crate) fn packet(
        &mut self,
        d: usize,
        seg: &Seg,
        seen_reply: bool,
        assured: bool,
        liberal: bool,
        t: &Timeouts,
    ) -> TcpVerdict {
        use crate::Invalid as I;
        let mut old = self.state_idx & 0x0f;
        let index = index_of(seg.flags);
        let mut new = TABLE[d][index as usize][old as usize];
        let mut skip_window = false;

        if new == SS && old >= TW {
            // RFC 1122: a SYN may re-open a connection in TIME_WAIT; Linux also re-opens after
            // a FIN (CLOSE_INIT) or a RST from this side, otherwise the SYN is ignored.
            let close_init = (self.flags[0] | self.flags[1]) & CLOSE_INIT != 0;
            if close_init || (self.last_dir() == d && self.last_index() == I_RST) {
                return TcpVerdict::Reopen;
            }
            new = IG;
        }
        if new == IG {
            self.ignore(d, seg, index, &mut new, &mut old);
            if new == IG {
                return TcpVerdict::Ignore;
            }
            // Re-synchronised on a SYN/ACK: continue as SYN_SENT -> SYN_RECV.
        }
        match new {
            IV => return TcpVerdict::Invalid(I::TcpState),
            TW if self.last_flags & EXP_CHALLENGE_ACK != 0 => {
                self.last_flags &= !EXP_CHALLENGE_ACK;
                return TcpVerdict::Ignore;
            }
            S2 => self.last_flags |= SIMOPEN,
            SR if d == 1 && index == I_ACK && self.last_flags & SIMOPEN != 0 => {
                new = ES;
            }
            CL if index == I_RST => {
                let old_s = TcpState::ALL[old as usize];
                let established = old == ES && assured;
                let r = 1 - d;
                let mut decided = false;
                if old_s.can_early_drop() {
                    skip_window = true;
                    decided = true;
                }
                if !decided && self.flags[r] & MAXACK_SET != 0 && self.last_index() != I_SYN {
                    let seq = seg.seq;
                    if seq == 0 && !established {
                        decided = true;
                    } else if before(seq, self.maxack[r]) {
                        return TcpVerdict::Invalid(I::TcpRst);
                    } else if !established
                        || seq == self.maxack[r]
                        || (self.last_index() == I_ACK
                            && self.last_dir() == d
                            && seq == self.last_end)
                    {
                        decided = true;
                    } else {
                        // Not exactly at the expected seq: keep the state, a challenge ACK
                        // may follow.
                        new = old;
                    }
                }
                if !decided
                    && ((seen_reply && self.last_index() == I_SYN)
                        || (!assured && self.last_index() == I_ACK))
                    && seg.ack == self.last_end
                {
                    // RST answering a SYN or ACK we let through while out of sync.
                    skip_window = true;
                }
                if !decided
                    && !skip_window
                    && old == SS
                    && self.last_index() == I_ACK
                    && self.last_dir() == 1
                    && self.challenge_ack() == Some(seg.seq)
                {
                    // RST answering a challenge ACK we let through in SYN_SENT (a reused
                    // tuple: the peer's old connection answered the SYN).
                    skip_window = true;
                }
            }
            _ => {}
        }

        if !skip_window {
            match self.in_window(d, index, seg, liberal) {
                Win::Accept => {}
                Win::Ignore => return TcpVerdict::Ignore,
                Win::Invalid(r) => return TcpVerdict::Invalid(r),
            }
        }

        self.set_last(index, d);
        self.set_state(new);
        if old != new && new == FW {
            self.flags[d] |= CLOSE_INIT;
        }
        let timeout = if index == I_RST {
            t.tcp_close
        } else {
            let base = t.tcp(TcpState::ALL[new as usize]);
            if (self.flags[0] | self.flags[1]) & DATA_UNACKNOWLEDGED != 0 && base > t.tcp_unack {
                t.tcp_unack
            } else {
                base
            }
        };
        let mut kill = false;
        let mut set_assured = false;
        if !seen_reply {
            if seg.flags & RST != 0 {
                kill = true;
            }
        } else if !assured && (old == SR || old == ES) && new == ES {
            set_assured = true;
        }
        TcpVerdict::Accept {
            timeout,
            kill,
            set_assured,
        }
    }

    /// The `sIG` case: resynchronise on a SYN/ACK answering a SYN we ignored (then `old` becomes
    /// SYN_SENT and `new` SYN_RECV), or note the segment and leave `new` as `IG`.
    fn ignore(&mut self, d: usize, seg: &Seg, index: u8, new: &mut u8, old: &mut u8) {
        let ld = self.last_dir();
        if index == I_SYNACK && self.last_index() == I_SYN && ld != d && seg.ack == self.last_end {
            *old = SS;
            *new = SR;
            self.end[ld] = self.last_end;
            self.maxend[ld] = self.last_end;
            self.maxwin[ld] = (self.last_win as u32).max(1);
            self.scale[ld] = self.last_wscale;
            self.flags[ld] = self.last_flags & (WINDOW_SCALE | SACK_PERM);
            self.end[d] = 0;
            self.maxend[d] = 0;
            self.maxwin[d] = 0;
            self.maxack[d] = 0;
            self.scale[d] = 0;
            self.flags[d] = 0;
            return;
        }
        *new = IG;
        self.annotate_ignored(seg, index, d);
        if *old == SS && index == I_ACK && d == 1 {
            // Possibly a challenge ACK to the SYN (the peer still has an old connection on
            // this tuple): the RST that answers it carries its ACK number as seq.
            self.set_challenge_ack(seg.ack);
        }
        if *old == LA {
            // RFC 5961 challenge ACK: the peer's ACK must not be taken as the last ACK.
            self.last_flags |= EXP_CHALLENGE_ACK;
        }
    }
}
