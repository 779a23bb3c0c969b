//! The SYN proxy where netfilter runs it: the `synproxy` statement (a chain's verdict,
//! [`Stateful::synproxy_stmt`]) and the proxy's hook on the packets of the connections it
//! opened, at the confirm point (`ipv4_synproxy_hook` / `ipv6_synproxy_hook`, priority
//! `NF_IP_PRI_CONNTRACK_CONFIRM - 1` at input and postrouting: [`Stateful::synproxy_hook`],
//! called by [`Stateful::finish_frame`]). The protocol is [`crate::synproxy`]'s.
//!
//! What the proxy sends leaves as the host's own packets (`ip_local_out`): the caller takes
//! them with [`Stateful::take_stack_out`] and sends each through the output and postrouting
//! hooks with the connection context it carries ([`StackSend`]), in order.

use super::{CtPkt, PacketCt, Stateful};
use crate::eval::{Decision, DropReason};
use crate::synproxy::{self as sp, cookie, Opts, Seg};
use weir_conntrack::{Dir, EntryId, TcpState};
use weir_lang::ir::Synproxy as Info;
use weir_wire::PacketMeta;

/// A packet the SYN proxy sends (an IP packet), with the connection context it leaves with.
#[derive(Clone, Debug)]
pub struct StackSend {
    pub ip: Vec<u8>,
    pub pc: PacketCt,
    /// Before it leaves, the sequence shift of a connection's direction is set (the kernel
    /// sets it between the two ACKs it sends; weir sends them after the packet that caused
    /// them): call [`Stateful::stack_before`].
    pub seqadj: Option<(EntryId, Dir, i32)>,
}

/// The most segments that wait for the caller.
pub const STACK_MAX: usize = 4096;

fn minute(now_ns: u64) -> u32 {
    (now_ns / 60_000_000_000) as u32
}

fn ms(now_ns: u64) -> u32 {
    (now_ns / 1_000_000) as u32
}

impl Stateful {
    /// What the SYN proxy sent since the last call, in order.
    pub fn take_stack_out(&mut self) -> Vec<StackSend> {
        std::mem::take(&mut self.stack_out)
    }

    /// Keep a segment to send; at most [`STACK_MAX`] wait (a caller that never takes them
    /// loses the rest, counted in `synproxy_unsent`).
    fn stack_push(&mut self, s: StackSend) {
        if self.stack_out.len() >= STACK_MAX {
            self.stats.synproxy_unsent += 1;
            return;
        }
        self.stack_out.push(s);
    }

    /// What has to happen before `s` leaves (see [`StackSend::seqadj`]).
    pub fn stack_before(&mut self, s: &StackSend) {
        if let Some((id, d, off)) = s.seqadj {
            self.ct.seqadj_init(id, d, off);
        }
    }

    /// `synproxy` took the packet (a TCP SYN or ACK, its checksum good: see the evaluator):
    /// answer a SYN with a cookie; open the connection to the server for an ACK whose cookie
    /// is good. The packet itself goes no further.
    pub(super) fn synproxy_stmt(
        &mut self,
        info: &Info,
        frame: &[u8],
        pm: &PacketMeta,
        pc: &PacketCt,
        now_ns: u64,
    ) -> Decision {
        let (Some(seg), Some(opts)) = (Seg::of(frame, pm), sp::parse_options(frame, pm)) else {
            return Decision::Drop(DropReason::SynproxyCookie);
        };
        if seg.flags & sp::SYN != 0 {
            self.stats.synproxy_syn += 1;
            let o = sp::synack_options(info, seg.flags, opts, ms(now_ns));
            let (isn, _) = cookie::make(&seg.flow(), seg.seq, o.mss_encode, minute(now_ns));
            let mut flags = sp::SYN | sp::ACK;
            if o.options & Info::ECN != 0 {
                flags |= sp::ECE;
            }
            let ip = sp::segment(
                seg.v6,
                &seg.dst,
                &seg.src,
                seg.dport,
                seg.sport,
                isn,
                seg.seq.wrapping_add(1),
                flags,
                0,
                &o,
            );
            // (the SYN's connection context, as `skb_nfct(skb)`: none when untracked)
            let pc = match pc.ct {
                CtPkt::Untracked => PacketCt {
                    ct: CtPkt::Untracked,
                    notrack: true,
                    ..PacketCt::default()
                },
                _ => self.answer_ct(pc),
            };
            self.stack_push(StackSend {
                ip,
                pc,
                seqadj: None,
            });
            return Decision::Drop(DropReason::Synproxy);
        }
        let mut opts = opts;
        if self.recv_client_ack(&seg, &mut opts, seg.seq, now_ns) {
            Decision::Drop(DropReason::Synproxy)
        } else {
            Decision::Drop(DropReason::SynproxyCookie)
        }
    }

    /// Linux `synproxy_recv_client_ack`: the cookie of the client's ACK (`recv_seq`: its
    /// sequence number, one more for a keep-alive) proved, the SYN to the server as the
    /// client's, the cookie in its acknowledgement field. Whether the cookie was good.
    fn recv_client_ack(&mut self, seg: &Seg, o: &mut Opts, recv_seq: u32, now_ns: u64) -> bool {
        let isn = seg.ack.wrapping_sub(1);
        let Some(mss) = cookie::check(&seg.flow(), recv_seq.wrapping_sub(1), isn, minute(now_ns))
        else {
            self.stats.synproxy_cookie_invalid += 1;
            return false;
        };
        self.stats.synproxy_cookie_valid += 1;
        o.mss_option = mss;
        o.options |= Info::MSS;
        if o.options & Info::TIMESTAMP != 0 {
            sp::check_timestamp_cookie(o);
        }
        let mut flags = sp::SYN;
        if o.options & Info::ECN != 0 {
            flags |= sp::ECE | sp::CWR;
        }
        let ip = sp::segment(
            seg.v6,
            &seg.src,
            &seg.dst,
            seg.sport,
            seg.dport,
            recv_seq.wrapping_sub(1),
            isn,
            flags,
            seg.window,
            o,
        );
        self.stack_push(StackSend {
            ip,
            pc: PacketCt {
                synproxy: true,
                ..PacketCt::default()
            },
            seqadj: None,
        });
        true
    }

    /// The proxy's hook on a TCP packet of a connection it opened (`id`, the packet's
    /// direction `dir`), as it leaves: the SYN to the server records the cookie; the server's
    /// SYN-ACK is acknowledged both ways and taken; the rest have their timestamps shifted.
    pub(super) fn synproxy_hook(
        &mut self,
        id: EntryId,
        dir: Dir,
        frame: &mut [u8],
        pm: &PacketMeta,
        now_ns: u64,
    ) -> Decision {
        let Some(seg) = Seg::of(frame, pm) else {
            return Decision::Drop(DropReason::Malformed(weir_wire::Malformed::TruncatedTcp));
        };
        let Some(mut x) = self.ct.synproxy(id) else {
            // (no state yet: the connection's first packet, the SYN to the server)
            if seg.flags & sp::SYN != 0 && seg.flags & sp::ACK == 0 && dir == Dir::Original {
                let o = sp::parse_options(frame, pm).unwrap_or_default();
                let its = if o.options & Info::TIMESTAMP != 0 {
                    o.tsecr
                } else {
                    0
                };
                self.ct.set_synproxy(
                    id,
                    weir_conntrack::synproxy::SynproxyExt {
                        isn: seg.ack,
                        its,
                        tsoff: 0,
                    },
                );
            }
            return Decision::Accept;
        };
        let state = self.ct.get(id).and_then(|e| e.tcp_state());
        let (syn, ack, rst) = (
            seg.flags & sp::SYN != 0,
            seg.flags & sp::ACK != 0,
            seg.flags & sp::RST != 0,
        );
        let mut reopened = false;
        if state == Some(TcpState::Close) {
            if rst && dir != Dir::Original {
                let off = x.isn.wrapping_sub(seg.seq) as i32;
                self.ct.seqadj_init(id, dir, off);
            } else if syn && !ack && dir == Dir::Original {
                // opened again: the shifts are set again once it is established
                x.tsoff = 0;
                self.ct.set_synproxy(id, x);
                self.stats.synproxy_reopened += 1;
                reopened = true;
            }
        }
        if reopened || state == Some(TcpState::SynSent) {
            let Some(mut o) = sp::parse_options(frame, pm) else {
                return Decision::Drop(DropReason::Synproxy);
            };
            if !syn && ack && dir == Dir::Original {
                // the client's ACK again, before the server answered
                return if self.recv_client_ack(&seg, &mut o, seg.seq.wrapping_add(1), now_ns) {
                    self.stats.synproxy_cookie_retrans += 1;
                    Decision::Drop(DropReason::Synproxy)
                } else {
                    Decision::Drop(DropReason::SynproxyCookie)
                };
            }
            x.isn = seg.ack;
            if o.options & Info::TIMESTAMP != 0 {
                x.its = o.tsecr;
            }
            self.ct.set_synproxy(id, x);
        } else if state == Some(TcpState::SynRecv) && syn && ack {
            let Some(mut o) = sp::parse_options(frame, pm) else {
                return Decision::Drop(DropReason::Synproxy);
            };
            if o.options & Info::TIMESTAMP != 0 {
                x.tsoff = o.tsval.wrapping_sub(x.its);
                self.ct.set_synproxy(id, x);
            }
            o.options &= !(Info::MSS | Info::WSCALE | Info::SACK_PERM);
            std::mem::swap(&mut o.tsval, &mut o.tsecr);
            // to the server, as the client: its SYN-ACK acknowledged with the client's window
            let maxwin = self
                .ct
                .get(id)
                .and_then(|e| e.tcp())
                .map_or(0, |t| t.maxwin[0]);
            let ip = sp::segment(
                seg.v6,
                &seg.dst,
                &seg.src,
                seg.dport,
                seg.sport,
                seg.ack,
                seg.seq.wrapping_add(1),
                sp::ACK,
                maxwin.min(u16::MAX as u32) as u16,
                &o,
            );
            self.stack_push(StackSend {
                ip,
                pc: PacketCt::default(),
                seqadj: None,
            });
            // to the client, as the server: the window it announces, from now on in the
            // cookie's sequence numbers
            std::mem::swap(&mut o.tsval, &mut o.tsecr);
            let ip = sp::segment(
                seg.v6,
                &seg.src,
                &seg.dst,
                seg.sport,
                seg.dport,
                seg.seq.wrapping_add(1),
                seg.ack,
                sp::ACK,
                seg.window >> o.wscale,
                &o,
            );
            let off = x.isn.wrapping_sub(seg.seq) as i32;
            self.stack_push(StackSend {
                ip,
                pc: PacketCt {
                    ct: CtPkt::Attached { id: Some(id), dir },
                    ..PacketCt::default()
                },
                seqadj: Some((id, dir, off)),
            });
            return Decision::Drop(DropReason::Synproxy);
        }
        sp::tstamp_adjust(frame, pm, dir == Dir::Reply, x.tsoff);
        Decision::Accept
    }
}
