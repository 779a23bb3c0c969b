//! What per-flow scripts send (the packets `queue`'s listener asked to send:
//! [`Stateful::take_queue_out`]): forged variants of a queued packet (split segments, fakes),
//! which leave as the router's own, by their destination's route and next hop, framed for
//! the output port. As nfqws2's raw sockets with their mark and `notrack`, they cross no
//! hook and are not tracked; they are not queued again. And what the engine itself sends as
//! the host would (the SYN proxy's segments), which cross the output and postrouting hooks.

use crate::Router;
use weir_engine::stateful::Stateful;
use weir_wire::Addr;

/// What became of the packets scripts sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SentStats {
    /// Framed for a port.
    pub framed: u64,
    /// Not IP, or no route to the destination.
    pub no_route: u64,
    /// The next hop's MAC is not known.
    pub no_neighbour: u64,
    /// Dropped by the output, postrouting or egress chains (the router's own packets).
    pub dropped: u64,
}

impl Router {
    /// The packets scripts asked to send since the last call, each as an Ethernet frame
    /// with the port it leaves by, in order. What cannot leave is counted in `st`.
    pub fn script_out(&mut self, sf: &mut Stateful, st: &mut SentStats) -> Vec<(usize, Vec<u8>)> {
        let out = sf.take_queue_out();
        let mut frames = Vec::with_capacity(out.len());
        for ip in out {
            let Some((port, hop, f)) = self.framed(&ip, st) else {
                continue;
            };
            if self.neigh.slot(hop).is_none() {
                st.no_neighbour += 1;
                continue;
            }
            st.framed += 1;
            frames.push((port, f));
        }
        frames
    }

    /// What the router itself sends from the engine (the SYN proxy's segments:
    /// [`Stateful::take_stack_out`]), as the kernel sends its own (`ip_local_out`): by route,
    /// through the output and postrouting hooks (connection tracking included) with the
    /// context each carries, then the port's egress chains, then to the next hop. Ethernet
    /// frames with their ports, in order; what the hooks drop is counted in `st.dropped`. For
    /// a next hop whose MAC is not known the frames hold its solicitation instead: the packet
    /// is lost after the hooks saw it (the kernel would queue it), and its peer sends again.
    pub fn stack_out(
        &mut self,
        sf: &mut Stateful,
        now: u64,
        st: &mut SentStats,
    ) -> Vec<(usize, Vec<u8>)> {
        let mut frames = Vec::new();
        // (what the hooks of one may send in turn follows it)
        loop {
            let out = sf.take_stack_out();
            if out.is_empty() {
                return frames;
            }
            for s in out {
                sf.stack_before(&s);
                let Some((port, hop, f)) = self.framed(&s.ip, st) else {
                    continue;
                };
                let Some(mut f) = self.answer_out(sf, port, f, s.pc, now) else {
                    st.dropped += 1;
                    continue;
                };
                match self.neigh.slot(hop).map(|s| self.neigh.mac_at(s)) {
                    Some(mac) => {
                        f[..6].copy_from_slice(&mac.0);
                        st.framed += 1;
                        frames.push((port, f));
                    }
                    None => {
                        st.no_neighbour += 1;
                        frames.extend(self.solicit(port, hop, now).map(|f| (port, f)));
                    }
                }
            }
        }
    }

    /// An IP packet the router sends, framed for the port its route leaves by (the next
    /// hop's MAC, when known; zeros otherwise), with the port and the next hop.
    fn framed(&self, ip: &[u8], st: &mut SentStats) -> Option<(usize, Addr, Vec<u8>)> {
        let (dst, ethertype) = match ip.first().map(|b| b >> 4) {
            Some(4) if ip.len() >= 20 => (
                Addr::v4(u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]])),
                0x0800u16,
            ),
            Some(6) if ip.len() >= 40 => {
                let mut b = [0u8; 16];
                b.copy_from_slice(&ip[24..40]);
                (Addr::v6(u128::from_be_bytes(b)), 0x86dd)
            }
            _ => {
                st.no_route += 1;
                return None;
            }
        };
        let Some(ri) = self.routes.lookup(dst) else {
            st.no_route += 1;
            return None;
        };
        let r = self.routes.get(ri);
        let (port, hop) = (r.port, r.via.unwrap_or(dst));
        let mac = self
            .neigh
            .slot(hop)
            .map(|s| self.neigh.mac_at(s))
            .unwrap_or_default();
        let src = self.ports[port].mac.unwrap_or_default();
        let mut f = Vec::with_capacity(14 + ip.len());
        f.extend_from_slice(&mac.0);
        f.extend_from_slice(&src.0);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(ip);
        Some((port, hop, f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Port, PortAddr, Route, Routes};
    use weir_conntrack::Config;
    use weir_engine::stateful::{FlowHook, QueueVerdict, Queued};
    use weir_engine::{Compiled, Engine, Meta, Mode};
    use weir_lang::ir::Hook;
    use weir_wire::{LinkType, Mac, PacketMeta};

    /// Sends two packets: one to a routed destination, one to nowhere.
    struct Sender;

    impl FlowHook for Sender {
        fn listens(&self, _: u16) -> bool {
            true
        }
        fn queued(&mut self, q: Queued<'_>) -> QueueVerdict {
            let l3 = q.pm.l3_off as usize;
            let ip = q.frame[l3..].to_vec();
            let mut lost = ip.clone();
            lost[16..20].copy_from_slice(&[203, 0, 113, 9]);
            q.send.extend([ip, lost, vec![0x60; 10]]);
            QueueVerdict::Drop
        }
    }

    #[test]
    fn sent_packets_leave_by_their_route_framed_for_the_next_hop() {
        let a = |o: [u8; 4]| Addr::v4(u32::from_be_bytes(o));
        let mut net = Router::new(
            vec![
                Port::new("lan0")
                    .with_mac(Mac([2, 0, 0, 0, 0, 1]))
                    .with_addrs([PortAddr::host(a([198, 18, 0, 254]))]),
                Port::new("wan0")
                    .with_mac(Mac([2, 0, 0, 0, 0, 2]))
                    .with_addrs([PortAddr::host(a([198, 19, 255, 254]))]),
            ],
            Routes::new(vec![
                Route::new(a([198, 18, 0, 0]), 16, 0, None),
                Route::new(a([198, 19, 0, 0]), 16, 1, Some(a([198, 19, 255, 1]))),
            ])
            .unwrap(),
        );
        net.set_neighbour(a([198, 19, 255, 1]), Mac([2, 0, 0, 0, 9, 9]));
        let rs = weir_lang::load_str(
            "t.nft",
            "table ip t {\n chain post {\n  type filter hook postrouting priority 0;\n  queue num 1\n }\n}\n",
        )
        .unwrap()
        .0;
        let mut sf = Stateful::new(
            Engine::new(Compiled::build(&rs, Mode::Compiled)),
            Config::default(),
        );
        sf.set_flow_hook(Some(Box::new(Sender)));
        let mut frame = weir_wire::build::Builder::new()
            .macs([2, 0, 0, 0, 0, 7], [2, 0, 0, 0, 0, 1])
            .udp(
                std::net::Ipv4Addr::new(198, 18, 0, 7),
                std::net::Ipv4Addr::new(198, 19, 0, 1),
                1000,
                53,
                b"q",
            );
        let mut pm = PacketMeta::parse(&frame, LinkType::Ethernet);
        let mut meta = Meta::with_ifnames("lan0", "wan0");
        let mut pc = weir_engine::stateful::PacketCt::default();
        let d = sf.hook_mut(
            Hook::Postrouting,
            &mut frame,
            &mut pm,
            &mut meta,
            1,
            &mut pc,
        );
        assert!(!d.is_accept());
        let mut st = SentStats::default();
        let out = net.script_out(&mut sf, &mut st);
        assert_eq!(
            st,
            SentStats {
                framed: 1,
                no_route: 2,
                no_neighbour: 0,
                dropped: 0
            }
        );
        assert_eq!(out.len(), 1);
        let (port, f) = &out[0];
        assert_eq!(*port, 1);
        assert_eq!(&f[..6], &[2, 0, 0, 0, 9, 9]);
        assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&f[12..], &frame[12..]);
        assert!(net.script_out(&mut sf, &mut st).is_empty());
    }
}
