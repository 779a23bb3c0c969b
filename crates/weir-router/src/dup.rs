//! Sending the copies `dup` made ([`Stateful::take_dup_out`]; the statement's semantics are
//! in `weir_engine::stateful::dup`).
//!
//! An ip or ip6 copy is routed to its gateway as Linux's `nf_dup_ipv4_route` routes it
//! (`FLOWI_FLAG_KNOWN_NH`): out of the device given, else by the route to the gateway; the
//! next hop is the route's gateway when it has one, else the gateway itself (with a device
//! given and no route to the gateway through it, the gateway is taken as on that link, as
//! Linux's output route with an output interface). It then leaves as the host's own packet
//! (output and postrouting untracked, the port's egress chains) to the next hop's MAC. A
//! netdev copy leaves by its device as it is, through that device's egress chains when the
//! statement ran at ingress (as `fwd to` does). While a copy crosses the hooks, `dup` makes
//! no copy ([`Stateful::set_duplicating`]).

use crate::Router;
use weir_engine::stateful::{CtPkt, DupSend, PacketCt, Stateful};
use weir_lang::ir::Hook;
use weir_wire::{Addr, Family, LinkType, PacketMeta};

/// What became of the copies `dup` made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DupStats {
    /// Framed for a port.
    pub sent: u64,
    /// No route to the gateway.
    pub no_route: u64,
    /// The device is not one of the router's ports.
    pub no_device: u64,
    /// The next hop's MAC is not known (its solicitation was sent instead).
    pub no_neighbour: u64,
    /// Dropped by the output, postrouting or egress chains.
    pub dropped: u64,
}

impl DupStats {
    /// The copies that did not leave.
    pub fn unsent(&self) -> u64 {
        self.no_route + self.no_device + self.no_neighbour + self.dropped
    }
}

impl Router {
    /// The copies `dup` made since the last call, each as an Ethernet frame with the port
    /// it leaves by, in order (with the solicitations of unknown next hops). What cannot
    /// leave is counted in `st`.
    pub fn dup_out(
        &mut self,
        sf: &mut Stateful,
        now: u64,
        st: &mut DupStats,
    ) -> Vec<(usize, Vec<u8>)> {
        let out = sf.take_dup_out();
        if out.is_empty() {
            return Vec::new();
        }
        self.bind(sf);
        self.install_fib(sf);
        let mut frames = Vec::with_capacity(out.len());
        sf.set_duplicating(true);
        for d in out {
            if d.to.family == 0 {
                self.dup_dev(sf, d, now, st, &mut frames);
            } else {
                self.dup_ip(sf, d, now, st, &mut frames);
            }
        }
        sf.set_duplicating(false);
        frames
    }

    fn port_of_name(&self, name: u128) -> Option<usize> {
        self.ports
            .iter()
            .position(|p| p.name_value == name && name != 0)
    }

    /// A netdev copy: out of its device as it is.
    fn dup_dev(
        &mut self,
        sf: &mut Stateful,
        d: DupSend,
        now: u64,
        st: &mut DupStats,
        frames: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let Some(port) = self.port_of_name(d.to.dev) else {
            st.no_device += 1;
            return;
        };
        let mut f = d.data;
        if d.hook == Hook::Ingress {
            let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
            if self
                .egress(sf, port, &mut f, &mut pm, d.mark, now)
                .is_some()
            {
                st.dropped += 1;
                return;
            }
        }
        st.sent += 1;
        frames.push((port, f));
    }

    /// An ip or ip6 copy: routed to its gateway, through output and postrouting.
    fn dup_ip(
        &mut self,
        sf: &mut Stateful,
        d: DupSend,
        now: u64,
        st: &mut DupStats,
        frames: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let fam = if d.to.family == 6 {
            Family::Ipv6
        } else {
            Family::Ipv4
        };
        let gw = Addr::new(fam, d.to.gw);
        let route = self.routes.lookup(gw).map(|i| self.routes.get(i));
        let (port, hop) = if d.to.dev != 0 {
            let Some(port) = self.port_of_name(d.to.dev) else {
                st.no_device += 1;
                return;
            };
            match route {
                Some(r) if r.port == port => (port, r.via.unwrap_or(gw)),
                _ => (port, gw),
            }
        } else {
            match route {
                Some(r) => (r.port, r.via.unwrap_or(gw)),
                None => {
                    st.no_route += 1;
                    return;
                }
            }
        };
        let ethertype: u16 = if fam.is_v6() { 0x86dd } else { 0x0800 };
        let src = self.ports[port].mac.unwrap_or_default();
        let mut f = Vec::with_capacity(14 + d.data.len());
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&src.0);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&d.data);
        let mut meta = self.meta(None, Some(port), d.mark);
        let pm = PacketMeta::parse(&f, LinkType::Ethernet);
        meta.rt_mss = self.tcp_mss(port, &pm);
        // (the copy is untracked: nf_ct_set(skb, NULL, IP_CT_UNTRACKED))
        let pc = PacketCt {
            ct: CtPkt::Untracked,
            notrack: true,
            oif_addr: self.ports[port].addr(fam).map(Addr::bits),
            ..PacketCt::default()
        };
        if !sf.local_out(&mut f, meta, pc, now).is_accept() {
            st.dropped += 1;
            return;
        }
        let mut pm = PacketMeta::parse(&f, LinkType::Ethernet);
        let mark = meta.mark;
        if self.egress(sf, port, &mut f, &mut pm, mark, now).is_some() {
            st.dropped += 1;
            return;
        }
        match self.neigh.slot(hop).map(|s| self.neigh.mac_at(s)) {
            Some(mac) => {
                f[..6].copy_from_slice(&mac.0);
                st.sent += 1;
                frames.push((port, f));
            }
            None => {
                st.no_neighbour += 1;
                frames.extend(self.solicit(port, hop, now).map(|f| (port, f)));
            }
        }
    }
}
