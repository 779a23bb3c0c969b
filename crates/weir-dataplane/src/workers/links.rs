//! The ports of an inline worker ([`Link`]: AF_XDP or AF_PACKET), how they are opened for
//! one worker or several ([`xdp_workers`]), and the copy of a frame from one port's batch to
//! another's output ([`forward_frame`]).

use crate::config::{Config, Io};
use crate::stats::PortStats;
use weir_wire::Mac;

/// An inline AF_PACKET port: a TPACKET_V3 ring with the virtio-net header on, so that each
/// frame says whether its sender left its checksum to offload and whether it is a super-frame
/// to cut ([`Link::rx_offload`]).
pub fn open_ring(name: &str) -> std::io::Result<weir_io::afpacket::Port> {
    weir_io::afpacket::Port::open_ring_with(
        name,
        weir_io::afpacket::RingConfig {
            vnet_hdr: true,
            ..weir_io::afpacket::RingConfig::default()
        },
    )
}

/// What the checksums of frames read on interface `name` are when the I/O does not say
/// (AF_XDP; AF_PACKET's ring says, per frame): whole on a NIC, whose frames come from the
/// wire (a partial checksum is what a sender on this host leaves to offload, and it
/// never leaves a device unfinished), so the router does not look; possibly partial
/// elsewhere: veth and other virtual links to this host's own senders, and the
/// paravirtual NICs through which a hypervisor hands its guests frames of co-located
/// guests with the checksum still to finish (virtio-net, Xen, Hyper-V, VMware).
pub fn rx_checksums(name: &str) -> weir_router::RxCsum {
    const PARAVIRTUAL: [&str; 5] = ["virtio_net", "vif", "xen-netfront", "hv_netvsc", "vmxnet3"];
    let driver = std::fs::read_link(format!("/sys/class/net/{name}/device/driver"));
    match driver.ok().as_ref().and_then(|d| d.file_name()) {
        Some(d) if !PARAVIRTUAL.iter().any(|p| d == *p) => weir_router::RxCsum::Complete,
        _ => weir_router::RxCsum::Unknown,
    }
}

/// The receive queues of an interface (1 when sysfs does not say).
pub fn rx_queues(name: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(1)
}

/// Several workers over AF_XDP: every interface needs one receive queue per worker; worker
/// `w` reads queue `w` of each (the XDP program sends a queue's frames to its socket) and
/// steers in software what belongs to another worker ([`crate::handoff`]). None: use
/// AF_PACKET with a fanout (`io = "auto"` on interfaces without one queue per worker, or
/// `io = "afpacket"`).
#[allow(clippy::type_complexity)]
pub fn xdp_workers(
    cfg: &Config,
    n: u16,
) -> anyhow::Result<Option<Vec<(Vec<Link>, Vec<Option<weir_io::afpacket::Port>>)>>> {
    if cfg.io == Io::Afpacket {
        return Ok(None);
    }
    if let Some(i) = cfg
        .interface
        .iter()
        .find(|i| rx_queues(&i.name) != n as usize)
    {
        let q = rx_queues(&i.name);
        anyhow::ensure!(
            cfg.io != Io::Xdp,
            "workers = {n} with io = \"xdp\": {} has {q} receive queue(s), and each worker reads one queue of every interface: give it {n} (`ethtool -L {} combined {n}`, or `rx {n} tx {n}` on a veth), or use io = \"afpacket\" (or \"auto\"), whose fanout steers flows to workers",
            i.name,
            i.name
        );
        tracing::info!(interface = %i.name, queues = q, workers = n, "not one receive queue per worker: AF_PACKET rings with a fanout steering flows to workers");
        return Ok(None);
    }
    let mut links: Vec<(Vec<Link>, Vec<Option<weir_io::afpacket::Port>>)> =
        (0..n).map(|_| (Vec::new(), Vec::new())).collect();
    for i in &cfg.interface {
        let mut prog = None;
        for (w, (ports, arp)) in links.iter_mut().enumerate() {
            let p = match weir_io::xdp::Port::open_queue(
                &i.name,
                cfg.nfqueue.batch,
                w as u32,
                n as u32,
                prog.clone(),
            ) {
                Ok(p) => p,
                Err(e) if cfg.io == Io::Xdp => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(interface = %i.name, error = %e, "AF_XDP not available; using AF_PACKET");
                    return Ok(None);
                }
            };
            prog = Some(p.program.clone());
            ports.push(Link::Xdp(Box::new(p)));
            // ARP and neighbour discovery go to the kernel: worker 0 reads them on a side
            // socket and shares what it learns; the others send their requests on the port
            arp.push(if w == 0 {
                Some(weir_io::afpacket::Port::open(&i.name, 64)?)
            } else {
                None
            });
        }
    }
    Ok(Some(links))
}

/// One port of the inline router: AF_PACKET or AF_XDP.
pub enum Link {
    Packet(Box<weir_io::afpacket::Port>),
    Xdp(Box<weir_io::xdp::Port>),
}

impl Link {
    /// Open interface `name` as `io` says (`auto`: AF_XDP, else AF_PACKET).
    pub fn open(name: &str, io: Io, batch: usize) -> anyhow::Result<Link> {
        if io != Io::Afpacket {
            let queues = rx_queues(name);
            let r = if queues > 1 {
                Err(anyhow::anyhow!(
                    "{name} has {queues} receive queues and weir reads queue 0 only: set one with `ethtool -L {name} combined 1`, or io = \"afpacket\""
                ))
            } else {
                weir_io::xdp::Port::open(name, batch)
                    .map(|p| Link::Xdp(Box::new(p)))
                    .map_err(anyhow::Error::from)
            };
            match r {
                Ok(l) => return Ok(l),
                Err(e) if io == Io::Xdp => return Err(e),
                Err(e) => {
                    tracing::warn!(interface = name, error = %e, "AF_XDP not available; using AF_PACKET")
                }
            }
        }
        Ok(Link::Packet(Box::new(open_ring(name)?)))
    }

    pub fn name(&self) -> &str {
        match self {
            Link::Packet(p) => &p.name,
            Link::Xdp(p) => &p.name,
        }
    }

    pub fn mac(&self) -> Mac {
        Mac(match self {
            Link::Packet(p) => p.mac,
            Link::Xdp(p) => p.mac,
        })
    }

    pub fn fd(&self) -> i32 {
        match self {
            Link::Packet(p) => p.fd(),
            Link::Xdp(p) => p.fd(),
        }
    }

    pub fn kind(&self) -> String {
        match self {
            Link::Packet(_) => "AF_PACKET, TPACKET_V3 ring".into(),
            Link::Xdp(p) => format!("AF_XDP, XDP {}", p.program.mode),
        }
    }

    pub fn recv_batch(&mut self) -> std::io::Result<usize> {
        match self {
            Link::Packet(p) => p.recv_batch(),
            Link::Xdp(p) => p.recv_batch(),
        }
    }

    pub fn frame_mut(&mut self, i: usize) -> (&mut [u8], bool) {
        match self {
            Link::Packet(p) => p.frame_mut(i),
            Link::Xdp(p) => p.frame_mut(i),
        }
    }

    pub fn frame(&self, i: usize) -> &[u8] {
        match self {
            Link::Packet(p) => p.frame(i),
            Link::Xdp(p) => p.frame(i),
        }
    }

    /// What the kernel knows of frame `i`'s checksum and segmentation (AF_XDP: nothing).
    pub fn rx_offload(&self, i: usize) -> weir_io::afpacket::RxOffload {
        match self {
            Link::Packet(p) => p.rx_offload(i),
            Link::Xdp(_) => weir_io::afpacket::RxOffload::default(),
        }
    }

    pub fn recv_done(&mut self) {
        match self {
            Link::Packet(p) => p.recv_done(),
            Link::Xdp(p) => p.recv_done(),
        }
    }

    pub fn push(&mut self, f: &[u8]) {
        match self {
            Link::Packet(p) => p.push(f),
            Link::Xdp(p) => p.push(f),
        }
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Link::Packet(p) => p.flush(),
            Link::Xdp(p) => p.flush(),
        }
    }

    /// (received, sent) frames.
    pub fn counts(&self) -> (u64, u64) {
        match self {
            Link::Packet(p) => (p.stats.received, p.stats.sent),
            Link::Xdp(p) => (p.stats.received, p.stats.sent),
        }
    }

    /// The port's counters.
    pub fn stats(&mut self) -> PortStats {
        match self {
            Link::Packet(p) => PortStats {
                name: p.name.clone(),
                kind: "AF_PACKET".into(),
                xdp: false,
                received: p.stats.received,
                sent: p.stats.sent,
                truncated: p.stats.truncated,
                send_errors: p.stats.send_errors,
                ring_drops: p.ring_drops(),
                ..PortStats::default()
            },
            Link::Xdp(p) => {
                p.refresh_stats();
                PortStats {
                    name: p.name.clone(),
                    kind: format!("AF_XDP, XDP {}", p.program.mode),
                    xdp: true,
                    received: p.stats.received,
                    sent: p.stats.sent,
                    send_errors: p.stats.send_errors,
                    kernel_dropped: p.stats.kernel_dropped,
                    kernel_ring_full: p.stats.kernel_ring_full,
                    kernel_fill_empty: p.stats.kernel_fill_empty,
                    ..PortStats::default()
                }
            }
        }
    }
}

/// Copy frame `i` of port `from`'s batch (its first `len` bytes) into port `to`'s output.
pub fn forward_frame(ports: &mut [Link], from: usize, i: usize, to: usize, len: usize) {
    use std::cmp::Ordering as O;
    let cut = |f: &[u8]| -> usize { len.min(f.len()) };
    match from.cmp(&to) {
        O::Equal => {
            let f = ports[from].frame(i);
            let f = f[..cut(f)].to_vec();
            ports[to].push(&f);
        }
        O::Less => {
            let (a, b) = ports.split_at_mut(to);
            let f = a[from].frame(i);
            b[0].push(&f[..cut(f)]);
        }
        O::Greater => {
            let (a, b) = ports.split_at_mut(from);
            let f = b[0].frame(i);
            a[to].push(&f[..cut(f)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_router::RxCsum;

    /// Only a NIC's frames are taken as whole: the loopback, a name that is no interface,
    /// every virtual link of this machine (no device in sysfs: veth, bridges...) and every
    /// virtio-net NIC are asked per frame.
    #[test]
    fn rx_checksums_trust_only_nics() {
        assert_eq!(rx_checksums("lo"), RxCsum::Unknown);
        assert_eq!(rx_checksums("weirnosuchif0"), RxCsum::Unknown);
        for e in std::fs::read_dir("/sys/class/net")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let driver = std::fs::read_link(e.path().join("device/driver")).ok();
            let virtio = driver
                .as_ref()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d == "virtio_net");
            if driver.is_none() || virtio {
                assert_eq!(rx_checksums(&name), RxCsum::Unknown, "{name}");
            }
        }
    }
}
