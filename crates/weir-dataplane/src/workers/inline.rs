//! An inline worker: its ports ([`Link`]), its router (`weir_router::Router`), the later
//! fragments it holds, and one batch of frames from read to send ([`Inline::step`]); what
//! becomes of each frame is [`Inline::settle`]'s.

use super::handoff::Handoff;
use super::links::{forward_frame, Link};
use super::{now_ns, State};
use crate::stats::Counts;
use crate::trace::{self, Trace};
use weir_engine::stateful::Stateful;
use weir_io::afpacket::GsoKind;
use weir_router::{Fate, IcmpAnswer, Reason, Router, Rx, RxCsum};
use weir_wire::{LinkType, PacketMeta};

/// The inline router's ports and tables.
pub struct Inline {
    pub ports: Vec<Link>,
    /// AF_XDP mode: per port, an AF_PACKET socket for ARP only (the XDP program passes ARP
    /// to the kernel; weir learns neighbours from it and sends its requests).
    pub arp: Vec<Option<weir_io::afpacket::Port>>,
    /// The path of a frame: ports, routes, neighbours, adjacencies, ICMP limits.
    pub router: Router,
    /// The frames of the batch being handled that leave: (frame index, output port, length).
    pub fwd: Vec<(usize, usize, usize)>,
    pub ports_names: Vec<String>,
    /// Per port, what a frame's checksum is when its I/O does not say
    /// ([`super::links::rx_checksums`]).
    pub rx_csum: Vec<RxCsum>,
    /// When the sockets were last polled (ns).
    pub polled: u64,
    /// The poll set (ports, then side sockets), built on the first batch.
    pub fds: Vec<libc::pollfd>,
    /// Several workers: this one's ends of the fragment handoff.
    pub handoff: Option<Handoff>,
    /// When the ports' MTUs were last read (ns).
    pub mtu_read: u64,
    /// Later fragments waiting for their first.
    pub held: Held,
    /// Local delivery: per port, how frames for the router reach the kernel's stack (None:
    /// local delivery is off; the router drops such packets).
    pub inject: Vec<Option<weir_io::inject::Injector>>,
    /// Local delivery to `tproxy`'s transparent sockets: (port, target, the injector whose
    /// frames carry the target's mark), opened on first use.
    pub inject_tproxy: Vec<(usize, u8, weir_io::inject::Injector)>,
    /// Worker 0 with local delivery: per port, what the kernel itself sends out of it, for
    /// connection tracking.
    pub monitor: Vec<Option<weir_io::afpacket::Port>>,
}

/// A frame handed over to another worker that the kernel sent (seen by a monitor), not one
/// read from the port: its port number carries this bit.
pub const HOST_OUT: usize = 1 << 31;

/// Later fragments held until their first has passed, tagged with the port they came in
/// on.
pub type Held = weir_engine::frag::Held<usize>;

/// How often inline mode reads its ports' MTUs again (`ip link set ... mtu` while it runs).
const MTU_PERIOD_NS: u64 = 1_000_000_000;

impl Inline {
    /// The injector of port `pi` for `tproxy` target `t`, opened on first use (None, logged
    /// once, when it cannot be opened).
    fn tproxy_injector(&mut self, pi: usize, t: u8) -> Option<&mut weir_io::inject::Injector> {
        let at = match self
            .inject_tproxy
            .iter()
            .position(|(p, x, _)| *p == pi && *x == t)
        {
            Some(at) => at,
            None => {
                let name = self.ports_names.get(pi)?;
                match weir_io::inject::Injector::open_marked(name, weir_io::inject::tproxy_mark(t))
                {
                    Ok(inj) => self.inject_tproxy.push((pi, t, inj)),
                    Err(e) => {
                        tracing::warn!(interface = %name, error = %e, "cannot hand tproxy's packets to the kernel");
                        return None;
                    }
                }
                self.inject_tproxy.len() - 1
            }
        };
        Some(&mut self.inject_tproxy[at].2)
    }

    /// Read the ports' MTUs again if [`MTU_PERIOD_NS`] has passed; a change takes effect for
    /// the next packet (and is logged by worker `log`). A port whose MTU cannot be read keeps
    /// the last one.
    pub fn refresh_mtu(&mut self, now: u64, log: bool) {
        if now.saturating_sub(self.mtu_read) < MTU_PERIOD_NS {
            return;
        }
        self.mtu_read = now;
        for (pi, name) in self.ports_names.iter().enumerate() {
            if let Ok(new) = weir_io::afpacket::mtu(name) {
                let m = self.router.port(pi).mtu;
                if new != m {
                    if log {
                        tracing::info!(interface = %name, from = m, to = new, "MTU changed");
                    }
                    self.router.set_mtu(pi, new);
                }
            }
        }
    }

    /// The segments of a super-frame read on port `pi`, each through the router (their
    /// checksums are whole) and sent.
    fn segments(&mut self, w: &mut State, pi: usize, segs: Vec<Vec<u8>>, now: u64) {
        for mut f in segs {
            let pm = PacketMeta::parse(&f, LinkType::Ethernet);
            let rx = Rx {
                hash: 0,
                csum: RxCsum::Complete,
            };
            let (fate, rewritten) = decide(
                &mut w.sf,
                &mut w.trace,
                &mut self.router,
                &self.ports_names,
                &mut f,
                pm,
                pi,
                rx,
                now,
            );
            let f: &[u8] = &f;
            if let Some((o, len)) =
                self.settle(&mut w.sf, &mut w.counts, pi, fate, rewritten, now, &|_| {
                    f.to_vec()
                })
            {
                self.ports[o].push(&f[..len.min(f.len())]);
            }
        }
    }

    /// Per-flow scripts' timers (at most every `TICK_NS`), between batches: what they send
    /// goes out by its routes now (the ports flushed if `flush`, else by the batch).
    fn tick(&mut self, w: &mut State, now: u64, flush: bool) -> std::io::Result<()> {
        w.sf.tick(now);
        if w.sf.queue_out_pending() {
            self.send_scripted(&mut w.sf, &mut w.counts, now);
            if flush {
                for p in self.ports.iter_mut() {
                    p.flush()?;
                }
            }
        }
        Ok(())
    }

    /// Frames waiting for their next hop ([`weir_router::unres`]): those whose hop answered
    /// leave (queued on their port), the question is asked again each second, those not
    /// answered after three questions are dropped and counted.
    fn unresolved_out(&mut self, w: &mut State, now: u64) {
        if self.router.unresolved() == 0 {
            return;
        }
        let r = self.router.release_unresolved(&mut w.sf, now);
        w.counts.packets += r.dropped;
        w.counts.dropped.add(Reason::NoNeighbour, r.dropped);
        for (port, q) in r.asks {
            match &mut self.arp[port] {
                Some(a) => a.push(&q),
                None => self.ports[port].push(&q),
            }
        }
        for (pi, fate, f) in r.ready {
            let c = &mut w.counts;
            if let Some((o, len)) = self.settle(&mut w.sf, c, pi, fate, false, now, &|_| f.clone())
            {
                self.ports[o].push(&f[..len.min(f.len())]);
            }
        }
        // each sender of what was dropped is told (rate-limited as the router's other errors)
        for (pi, f, ct) in r.unreachable {
            let v6 = PacketMeta::parse(&f, LinkType::Ethernet).l3 == weir_wire::L3::Ipv6;
            let (t, code) = if v6 {
                weir_router::unres::UNREACHABLE_V6
            } else {
                weir_router::unres::UNREACHABLE_V4
            };
            let why = Reason::NoNeighbour;
            match self
                .router
                .icmp_answer(&mut w.sf, pi, &f, why, t, code, 0, ct, now)
            {
                IcmpAnswer::Send(e) => {
                    w.counts.icmp_errors += 1;
                    self.ports[pi].push(&e)
                }
                IcmpAnswer::Limited => w.counts.icmp_limited += 1,
                IcmpAnswer::None => {}
            }
        }
    }
    /// What per-flow scripts sent for the frame just decided (split segments, fakes): out
    /// by their routes now, before the frame itself.
    fn send_scripted(&mut self, sf: &mut Stateful, c: &mut Counts, now: u64) {
        let mut st = weir_router::SentStats::default();
        for (port, f) in self.router.script_out(sf, &mut st) {
            self.ports[port].push(&f);
        }
        c.script_sent += st.framed;
        c.script_unsent += st.no_route + st.no_neighbour;
        // the SYN proxy's segments, as the host's own
        let mut st = weir_router::SentStats::default();
        for (port, f) in self.router.stack_out(sf, now, &mut st) {
            self.ports[port].push(&f);
        }
        c.host_out += st.framed;
        c.answers_failed += st.no_route + st.no_neighbour + st.dropped;
        // the copies `dup` made (and the solicitations of their next hops)
        let mut st = weir_router::DupStats::default();
        for (port, f) in self.router.dup_out(sf, now, &mut st) {
            self.ports[port].push(&f);
        }
        c.dup_sent += st.sent;
        c.dup_unsent += st.unsent();
    }

    /// Carry out the fate of a frame read on port `pi`: drops counted, neighbour requests,
    /// ICMP errors and fragments sent. A frame that leaves whole is counted and its output
    /// port and length returned, for the caller to send it. `frame` gives the frame's bytes
    /// (read only on the rare paths that need them).
    #[allow(clippy::too_many_arguments)]
    pub fn settle(
        &mut self,
        sf: &mut Stateful,
        c: &mut Counts,
        pi: usize,
        fate: Fate,
        rewritten: bool,
        now: u64,
        frame: &dyn Fn(&Inline) -> Vec<u8>,
    ) -> Option<(usize, usize)> {
        if sf.queue_out_pending() {
            self.send_scripted(sf, c, now);
        }
        match fate {
            Fate::NotMine => {}
            Fate::Hold => {
                let f = frame(self);
                if let Some(dropped) = self.held.hold(pi, f, LinkType::Ethernet, now) {
                    c.packets += dropped as u64;
                    c.dropped.add(Reason::Fragment, dropped as u64);
                }
            }
            Fate::Drop(why) => c.drop(why),
            Fate::Local { len, tproxy } => {
                c.packets += 1;
                if self.inject.get(pi).is_some_and(|i| i.is_some()) {
                    let f = frame(self);
                    let f = &f[..len.min(f.len())];
                    let inj = match tproxy {
                        None => self.inject[pi].as_mut(),
                        Some(t) => self.tproxy_injector(pi, t),
                    };
                    match inj {
                        Some(inj) => {
                            c.accepted += 1;
                            c.local += 1;
                            inj.push(f);
                        }
                        None => c.dropped.add(Reason::ToRouter, 1),
                    }
                } else {
                    c.dropped.add(Reason::ToRouter, 1);
                }
            }
            Fate::Reset(rst) => {
                c.drop(Reason::Reject);
                c.resets += 1;
                self.ports[pi].push(&rst);
            }
            Fate::NoNeighbour {
                port,
                hop,
                len,
                mark,
                ct,
            } => {
                if len > 0 {
                    // kept until the next hop answers (`Inline::step` releases it)
                    let f = frame(self);
                    let f = &f[..len.min(f.len())];
                    let dropped = self
                        .router
                        .hold_unresolved(port, hop, f, pi, mark, *ct, now);
                    c.packets += dropped;
                    c.dropped.add(Reason::NoNeighbour, dropped);
                } else {
                    c.drop(Reason::NoNeighbour);
                }
                if let Some(req) = self.router.solicit(port, hop, now) {
                    match &mut self.arp[port] {
                        Some(a) => a.push(&req),
                        None => self.ports[port].push(&req),
                    }
                }
            }
            Fate::Out { port, len } => {
                c.packets += 1;
                c.accepted += 1;
                c.rewritten += rewritten as u64;
                return Some((port, len));
            }
            Fate::Fragments { port: o, len } => {
                c.packets += 1;
                let f = frame(self);
                let f = &f[..len.min(f.len())];
                let l3 = PacketMeta::parse(f, LinkType::Ethernet).l3_off as usize;
                match weir_wire::frag::fragment_ipv4(f, l3, self.router.port(o).mtu) {
                    Some(pieces) => {
                        c.accepted += 1;
                        c.rewritten += rewritten as u64;
                        c.fragmented += 1;
                        // the frames before it in the batch leave first (no
                        // reordering within a flow)
                        for &(j, p, n) in &self.fwd {
                            forward_frame(&mut self.ports, pi, j, p, n);
                        }
                        self.fwd.clear();
                        for piece in &pieces {
                            self.ports[o].push(piece);
                        }
                    }
                    None => c.dropped.add(Reason::TooBig, 1),
                }
            }
            Fate::Icmp {
                why,
                typ,
                code,
                info,
                ct,
            } => {
                c.drop(why);
                let f = frame(self);
                match self
                    .router
                    .icmp_answer(sf, pi, &f, why, typ, code, info, *ct, now)
                {
                    IcmpAnswer::Send(e) => {
                        c.icmp_errors += 1;
                        self.ports[pi].push(&e)
                    }
                    IcmpAnswer::Limited => c.icmp_limited += 1,
                    IcmpAnswer::None => {}
                }
            }
        }
        None
    }
}

impl Inline {
    /// Wait for frames on any port, route each, send what goes out of each port in one
    /// call.
    pub fn step(&mut self, w: &mut State) -> std::io::Result<()> {
        let il = self;
        // the poll set and the MACs are the same for every batch: built once
        if il.fds.is_empty() {
            il.fds = il
                .ports
                .iter()
                .map(|p| p.fd())
                .chain(il.arp.iter().flatten().map(|a| a.fd()))
                .chain(il.handoff.as_ref().map(|h| h.fd()))
                .chain(il.monitor.iter().flatten().map(|m| m.fd()))
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
        }
        il.refresh_mtu(now_ns(), w.idx == 0);
        let mut fds = std::mem::take(&mut il.fds);
        for f in fds.iter_mut() {
            f.revents = 0;
        }
        let r = il.step_with(w, &mut fds);
        il.fds = fds;
        r
    }

    /// One batch of [`Inline::step`] over the poll set `fds` (ports, then side sockets).
    fn step_with(&mut self, w: &mut State, fds: &mut [libc::pollfd]) -> std::io::Result<()> {
        let il = self;
        let np = il.ports.len();
        il.router.neighbours_mut().sync();
        // AF_XDP frames are in the RX ring already: wait in poll only when every ring is
        // empty; while they are busy, look at the other sockets (the ARP/ND side sockets,
        // AF_PACKET ports) without waiting, at most once a millisecond
        let mut ready = false;
        for p in il.ports.iter_mut() {
            if let Link::Xdp(x) = p {
                ready |= x.recv_batch()? > 0;
            }
        }
        let now = now_ns();
        if !ready || now.saturating_sub(il.polled) >= 1_000_000 {
            il.polled = now;
            let wait = if ready {
                0
            } else if w.sf.ticking() {
                // timers to run: back by their tick
                10
            } else {
                100
            };
            // SAFETY: poll over live pollfds of our own sockets.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
            if r <= 0 && !ready {
                // idle: the timers still run, frames waiting for a next hop are asked for
                // again or dropped
                if il.router.unresolved() > 0 {
                    il.unresolved_out(w, now);
                    for p in il.ports.iter_mut() {
                        p.flush()?;
                    }
                    for a in il.arp.iter_mut().flatten() {
                        a.flush()?;
                    }
                }
                return il.tick(w, now_ns(), true);
            }
        }
        for (pi, p) in il.ports.iter().enumerate() {
            if let Link::Xdp(x) = p {
                if x.batch_len() > 0 {
                    fds[pi].revents |= libc::POLLIN;
                }
            }
        }
        let now = if ready { now } else { now_ns() };
        w.sf.set_wall_offset(super::wall_offset());
        w.sf.set_cpu(super::this_cpu());
        // timers before the batch's frames (their scripts' timer_set see this clock)
        il.tick(w, now, false)?;
        // what the kernel itself sent (a service on the router answering, a connection it
        // opens) is tracked before the frames read from the ports that need it: its replies,
        // which cannot have been read before it left, find their connection. One worker
        // reads the monitor when the poll says so, or before the first frame of the batch
        // for the router itself (a syscall per batch saved while the router only forwards);
        // with several, every batch (the others' replies reach them through the handoff)
        let mon_at = np + il.arp.iter().flatten().count() + il.handoff.is_some() as usize;
        let mut monitored = il.monitor.iter().all(Option::is_none);
        if !monitored && (il.handoff.is_some() || fds[mon_at..].iter().any(|f| f.revents != 0)) {
            drain_monitor(&mut il.monitor, &mut il.router, &mut il.handoff, w, now)?;
            monitored = true;
        }
        // ARP on the side sockets (AF_XDP mode): neighbours learnt from the link
        let mut ai = np;
        for (pi, a) in il.arp.iter_mut().enumerate() {
            let Some(a) = a else { continue };
            if fds[ai].revents != 0 {
                for i in 0..a.recv_batch()? {
                    il.router.learn(pi, a.frame(i));
                }
            }
            ai += 1;
        }
        // fragments other workers read for this one's connections (they were steered by
        // their addresses), in the order they were read
        if let Some(mut inbox) = il.handoff.as_mut().map(|h| h.take()) {
            for (_, pi, f) in inbox.iter_mut() {
                let pi = *pi;
                if pi & HOST_OUT != 0 {
                    w.counts.host_out += 1;
                    il.router
                        .host_out(&mut w.sf, pi & !HOST_OUT, f.clone(), now);
                    continue;
                }
                let pm = PacketMeta::parse(f, LinkType::Ethernet);
                let (fate, rewritten) = decide(
                    &mut w.sf,
                    &mut w.trace,
                    &mut il.router,
                    &il.ports_names,
                    f,
                    pm,
                    pi,
                    Rx {
                        hash: 0,
                        csum: il.rx_csum[pi],
                    },
                    now,
                );
                let f: &[u8] = f;
                if let Some((o, len)) =
                    il.settle(&mut w.sf, &mut w.counts, pi, fate, rewritten, now, &|_| {
                        f.to_vec()
                    })
                {
                    il.ports[o].push(&f[..len.min(f.len())]);
                }
            }
            if let Some(h) = il.handoff.as_mut() {
                h.done(inbox);
            }
        }
        for (pi, fd) in fds.iter().enumerate().take(np) {
            if fd.revents == 0 {
                continue;
            }
            let n = match &mut il.ports[pi] {
                Link::Xdp(x) if x.batch_len() > 0 => x.batch_len(),
                p => p.recv_batch()?,
            };
            il.fwd.clear();
            let is_packet = matches!(il.ports[pi], Link::Packet(_));
            for i in 0..n {
                let off = il.ports[pi].rx_offload(i);
                let (frame, truncated) = il.ports[pi].frame_mut(i);
                if off.outgoing {
                    // what the kernel itself sent from this port (local delivery, on an
                    // AF_PACKET port's own socket): tracked, to its connection's worker
                    host_sent(&mut il.router, &mut il.handoff, w, pi, frame.to_vec(), now);
                    continue;
                }
                // neighbours learnt from the ARP and ND traffic on the link
                il.router.learn(pi, frame);
                let (fate, rewritten) = if truncated {
                    (Fate::Drop(Reason::Truncated), false)
                } else {
                    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
                    if let Some(h) = il.handoff.as_mut() {
                        // a fragment of another worker's connection goes to it (with
                        // AF_XDP, any frame of another worker's connection)
                        if h.all || pm.frag != weir_wire::Frag::None {
                            if let Some(w) = h.owner(&pm, frame, now) {
                                h.send(w, pi, frame);
                                // later fragments of its datagram held here follow it there
                                if pm.frag == weir_wire::Frag::First && !il.held.is_empty() {
                                    let key = weir_engine::frag::Key::of(&pm);
                                    for (hp, hf) in il.held.take(&key) {
                                        h.send(w, hp, &hf);
                                    }
                                }
                                continue;
                            }
                        }
                    }
                    if let Some(g) = off.gso {
                        // a super-frame (its sender's segmentation offload, or GRO): cut as
                        // the device would have, then each segment takes the path
                        let segs = match g.kind {
                            GsoKind::Tcp4 | GsoKind::Tcp6 => {
                                weir_wire::offload::segment_tcp(frame, &pm, g.size).ok()
                            }
                            _ => None,
                        };
                        match segs {
                            Some(segs) => {
                                // (the frames before it in the batch leave first)
                                for &(j, p, len) in &il.fwd {
                                    forward_frame(&mut il.ports, pi, j, p, len);
                                }
                                il.fwd.clear();
                                il.segments(w, pi, segs, now);
                            }
                            None => w.counts.drop(Reason::Offload),
                        }
                        continue;
                    }
                    if !monitored
                        && weir_wire::Addr::dst_of(&pm).is_some_and(|a| il.router.is_local(a))
                    {
                        drain_monitor(&mut il.monitor, &mut il.router, &mut il.handoff, w, now)?;
                        monitored = true;
                    }
                    let csum = if off.csum_partial {
                        RxCsum::Partial
                    } else if is_packet {
                        RxCsum::Complete
                    } else {
                        il.rx_csum[pi]
                    };
                    decide(
                        &mut w.sf,
                        &mut w.trace,
                        &mut il.router,
                        &il.ports_names,
                        frame,
                        pm,
                        pi,
                        Rx { hash: 0, csum },
                        now,
                    )
                };
                if w.sf.queue_out_pending() {
                    // what scripts sent for this frame leaves after the batch's earlier
                    // frames, before this one
                    for &(j, p, len) in &il.fwd {
                        forward_frame(&mut il.ports, pi, j, p, len);
                    }
                    il.fwd.clear();
                }
                if let Some((o, len)) =
                    il.settle(&mut w.sf, &mut w.counts, pi, fate, rewritten, now, &|il| {
                        il.ports[pi].frame(i).to_vec()
                    })
                {
                    il.fwd.push((i, o, len));
                }
            }
            for &(i, o, len) in &il.fwd {
                forward_frame(&mut il.ports, pi, i, o, len);
            }
            // (the list names frames of this port's batch: nobody else may send them)
            il.fwd.clear();
            il.ports[pi].recv_done();
        }
        // later fragments that came before their first: those whose first has passed
        // follow it now (after it), those that waited too long are dropped
        if !il.held.is_empty() {
            if !monitored {
                drain_monitor(&mut il.monitor, &mut il.router, &mut il.handoff, w, now)?;
            }
            let (ready, expired) = il.held.ready(w.sf.frags_mut(), now);
            let expired = expired.len();
            if expired > 0 {
                w.counts.packets += expired as u64;
                w.counts.dropped.add(Reason::Fragment, expired as u64);
            }
            for (pi, mut f) in ready {
                let pm = PacketMeta::parse(&f, LinkType::Ethernet);
                let (fate, rewritten) = decide(
                    &mut w.sf,
                    &mut w.trace,
                    &mut il.router,
                    &il.ports_names,
                    &mut f,
                    pm,
                    pi,
                    Rx {
                        hash: 0,
                        csum: il.rx_csum[pi],
                    },
                    now,
                );
                let f: &[u8] = &f;
                let c = &mut w.counts;
                if let Some((o, len)) =
                    il.settle(&mut w.sf, c, pi, fate, rewritten, now, &|_| f.to_vec())
                {
                    il.ports[o].push(&f[..len.min(f.len())]);
                }
            }
        }
        il.unresolved_out(w, now);
        if let Some(h) = il.handoff.as_mut() {
            h.wake();
        }
        for p in il.ports.iter_mut() {
            p.flush()?;
        }
        for a in il.arp.iter_mut().flatten() {
            a.flush()?;
        }
        for inj in il.inject.iter_mut().flatten() {
            inj.flush()?;
        }
        for (_, _, inj) in il.inject_tproxy.iter_mut() {
            inj.flush()?;
        }
        w.sf.ct_mut().gc(now, 64);
        Ok(())
    }
}

/// [`Router::route_frame`] for a worker, `frame` read on port `pi` and parsed as `pm`:
/// traced if a trace asks for it, and whether its headers were rewritten (NAT, header
/// writes).
#[allow(clippy::too_many_arguments)]
fn decide(
    sf: &mut Stateful,
    trace: &mut Option<Trace>,
    router: &mut Router,
    names: &[String],
    frame: &mut [u8],
    pm: PacketMeta,
    pi: usize,
    rx: Rx,
    now: u64,
) -> (Fate, bool) {
    let traced =
        trace.is_some() && !matches!(pm.l3, weir_wire::L3::Other(_)) && trace::wants(trace, &pm);
    // `nft monitor trace` listening: the packets a rule marks (`meta nftrace set 1`)
    let hub = crate::monitor::hub();
    let watched = hub.tracing() && !matches!(pm.l3, weir_wire::L3::Other(_));
    if watched {
        sf.take_nftrace();
    }
    let before = (traced || watched).then(|| sf.engine().st.rule_hits.clone());
    let summary = (traced || watched).then(|| trace::frame_summary(frame, names[pi].as_str()));
    let writes = sf.stats().nat_rewritten + sf.stats().header_writes;
    let fate = router.route_frame(sf, frame, pm, pi, rx, now);
    let rewritten = sf.stats().nat_rewritten + sf.stats().header_writes != writes;
    if let (Some(before), Some(summary)) = (before, summary) {
        if watched && sf.take_nftrace() {
            let rules = trace::hits(sf, &before);
            hub.traced(&crate::monitor::trace_lines(
                hub.trace_id(),
                &summary,
                &rules,
                &fate.describe(names),
            ));
        }
        if traced {
            trace::record(trace, sf, &summary, &before, &fate.describe(names));
        }
    }
    (fate, rewritten)
}

/// Track what the kernel itself sent out of the ports since the last call (the monitor
/// sockets of worker 0): through the router's output and postrouting, or handed to the
/// worker that owns its connection.
fn drain_monitor(
    monitor: &mut [Option<weir_io::afpacket::Port>],
    router: &mut Router,
    handoff: &mut Option<Handoff>,
    w: &mut State,
    now: u64,
) -> std::io::Result<()> {
    for (pi, m) in monitor.iter_mut().enumerate() {
        let Some(m) = m.as_mut() else {
            continue;
        };
        let n = match m.recv_batch() {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        for i in 0..n {
            host_sent(router, handoff, w, pi, m.frame(i).to_vec(), now);
        }
    }
    Ok(())
}

/// A frame the kernel itself sent out of port `pi`: through the router's output and
/// postrouting here, or handed to the worker that owns its connection.
fn host_sent(
    router: &mut Router,
    handoff: &mut Option<Handoff>,
    w: &mut State,
    pi: usize,
    f: Vec<u8>,
    now: u64,
) {
    if let Some(h) = handoff.as_mut() {
        let pm = PacketMeta::parse(&f, LinkType::Ethernet);
        if let Some(o) = h.hash_owner(&pm, &f) {
            h.send(o, pi | HOST_OUT, &f);
            return;
        }
    }
    w.counts.host_out += 1;
    router.host_out(&mut w.sf, pi, f, now);
}
