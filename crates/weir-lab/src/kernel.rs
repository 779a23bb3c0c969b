//! The kernel side: a real Linux router in network namespaces, the oracle of the
//! differential tests (root only).
//!
//! [`Lab::new`] builds, for a checked [`Router`]:
//!
//! - a router namespace `weirlab-<pid>-<n>-r` with one veth end per topology interface (created
//!   directly inside the namespace under a `weirlab*` name, then renamed to the topology's name
//!   there, so no interface ever appears in the host namespace), its MAC, addresses (IPv6
//!   without DAD), routes and static neighbours (`nud permanent`, so forwarding needs no
//!   ARP/ND); IPv4 and IPv6 forwarding on, ICMP redirects off, each interface's IPv4
//!   `rp_filter` as the topology says (`net.ipv4.conf.all.rp_filter` 0, so the interface's
//!   own value is the one that applies: Linux takes the larger);
//! - one peer namespace `weirlab-<pid>-<n>-p<i>` per interface, holding the other veth end
//!   `weirlabp<i>` with IPv6 disabled (so the peers say nothing), and an AF_PACKET socket on it
//!   that both injects frames and captures what the router sends to that side.
//!
//! [`Lab::load`] loads a ruleset with `nft -f` in the router namespace (after `flush ruleset`)
//! and returns nft's own error text if it refuses. [`Lab::inject`] sends the packets one at a
//! time from the peer of their input interface and collects what leaves the router on every
//! side, with timestamps, plus the copies that raw IP sockets in the router namespace receive
//! (packets delivered locally, after the `input` hook).
//!
//! When has a packet's output all arrived? After each frame the lab sends an *ARP barrier*: an
//! ARP request from 0.0.0.0 (an address probe, so no neighbour entry is created) for a router
//! address, with a sender MAC unique to this packet. Frames sent from one CPU through a veth are
//! processed in order by that CPU's backlog, and everything the router does with a packet
//! (forwarding, local delivery, ICMP errors, resets) happens synchronously in that processing,
//! so when the barrier's ARP reply comes back, the packet's output is already queued on the
//! capture sockets (the sending thread is pinned to one CPU for this). `ip`/`inet`/`ip6`
//! rulesets never see ARP. Without an IPv4 address on the router, or when the reply does not
//! come (an `arp` table dropping it), the lab waits for a quiet period instead (bounded).
//! Frames that arrive after the last packet's window are counted as *late*: a sign that the
//! window was wrong.
//!
//! A VLAN tag the veth keeps in a frame's metadata (the router's netdev ingress chains may
//! forward a tagged frame with `fwd`) is put back into the captured bytes from the socket's
//! `PACKET_AUXDATA`, so a frame is compared as it would be on the wire.
//!
//! Kernel chatter is not attributed to packets: frames to a multicast or broadcast MAC (IPv6
//! ND/MLD, ARP requests) and ARP. Everything is torn down when the [`Lab`] is dropped, and
//! [`cleanup_stale`] removes namespaces left by a lab process that died.

use crate::model::{peer_mac, Prepared};
use crate::sys;
use crate::topology::{mac_text, Mac, Router};
use crate::Error;
use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use weir_wire::{LinkType, PacketMeta, L3};

/// Prefix of every namespace the lab creates.
pub const NS_PREFIX: &str = "weirlab-";

/// Lab settings.
#[derive(Clone, Copy, Debug)]
pub struct LabOptions {
    /// How long to wait for a packet's barrier reply, and the quiet period that ends a window
    /// without one (a window never exceeds ten of these).
    pub quiet: Duration,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            quiet: Duration::from_millis(30),
        }
    }
}

/// A frame that left the router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// The router interface it left by.
    pub iface: usize,
    pub ts_ns: u64,
    pub frame: Vec<u8>,
}

/// A packet the router's own stack received (read on a raw IP socket in the router namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalCopy {
    pub v6: bool,
    pub proto: u8,
    /// IPv6: the source address (raw IPv6 sockets deliver the transport bytes only).
    pub src: Option<IpAddr>,
    /// IPv4: the whole IP packet; IPv6: the transport header and payload.
    pub data: Vec<u8>,
    pub ts_ns: u64,
}

/// What the kernel did with one injected packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Frames that left the router in the packet's window (chatter excluded).
    pub frames: Vec<Captured>,
    /// Copies delivered to the router's stack.
    pub local: Vec<LocalCopy>,
    /// Chatter frames seen in the window (not attributed).
    pub chatter: usize,
    /// The barrier reply closed the window (otherwise the quiet period did).
    pub barrier: bool,
    /// The packet was not injected.
    pub skipped: bool,
}

/// The result of injecting a capture.
#[derive(Clone, Debug, Default)]
pub struct Injection {
    pub observed: Vec<Observed>,
    /// Frames that came after the last window (should be none).
    pub late: Vec<Captured>,
    /// Windows closed by the quiet period instead of the barrier.
    pub barrier_misses: usize,
    pub seconds: f64,
}

/// Why the lab cannot run here (not root, `ip` or `nft` missing); `None` when it can.
pub fn unavailable() -> Option<String> {
    if sys::euid() != 0 {
        return Some("needs root for network namespaces (run as root, or use `weir lab predict` for the weir side only)".into());
    }
    [
        ("ip", "-V", "iproute2"),
        ("nft", "--version", "nftables"),
        ("conntrack", "--version", "conntrack"),
    ]
    .into_iter()
    .find_map(|(tool, arg, pkg)| tool_missing(tool, arg, pkg))
}

/// Why `tool arg` does not run (with the Debian package to install), or None.
fn tool_missing(tool: &str, arg: &str, pkg: &str) -> Option<String> {
    let ok = Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    (!ok).then(|| format!("`{tool}` is not installed (apt-get install -y {pkg})"))
}

/// Which iptables the lab loads rulesets with (`weir lab diff --iptables`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IptBackend {
    /// Whatever `iptables-restore` is on this system (Debian: the nf_tables one).
    #[default]
    System,
    /// `iptables-nft-restore`: rules become nftables tables (`table ip filter`).
    Nft,
    /// `iptables-legacy-restore`: x_tables.
    Legacy,
}

impl IptBackend {
    /// The restore command for a family.
    pub fn restore(self, v6: bool) -> &'static str {
        match (self, v6) {
            (IptBackend::System, false) => "iptables-restore",
            (IptBackend::System, true) => "ip6tables-restore",
            (IptBackend::Nft, false) => "iptables-nft-restore",
            (IptBackend::Nft, true) => "ip6tables-nft-restore",
            (IptBackend::Legacy, false) => "iptables-legacy-restore",
            (IptBackend::Legacy, true) => "ip6tables-legacy-restore",
        }
    }

    /// `WEIR_LAB_IPT_BACKEND` / `--iptables-backend`: `system`, `nft` or `legacy`.
    pub fn parse(s: &str) -> Option<IptBackend> {
        match s.trim() {
            "" | "system" | "default" => Some(IptBackend::System),
            "nft" | "nf_tables" => Some(IptBackend::Nft),
            "legacy" => Some(IptBackend::Legacy),
            _ => None,
        }
    }
}

/// The empty `filter` table: every built-in chain with policy ACCEPT.
pub const EMPTY_FILTER: &str =
    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";

/// Why the iptables lab cannot run here (the nft lab's reasons, or `iptables-restore` /
/// `ip6tables-restore` of the backend missing); `None` when it can.
pub fn unavailable_iptables(backend: IptBackend) -> Option<String> {
    if let Some(why) = unavailable() {
        return Some(why);
    }
    [false, true]
        .into_iter()
        .find_map(|v6| tool_missing(backend.restore(v6), "--version", "iptables"))
}

/// The version line of the backend's iptables, e.g. `iptables v1.8.9 (nf_tables)` (None when
/// it cannot run).
pub fn iptables_version(backend: IptBackend) -> Option<String> {
    let tool = match backend {
        IptBackend::System => "iptables",
        IptBackend::Nft => "iptables-nft",
        IptBackend::Legacy => "iptables-legacy",
    };
    let out = Command::new(tool)
        .arg("-V")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

pub(crate) fn run(cmd: &mut Command, stdin: Option<&str>, what: &str) -> Result<String, String> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    if let Some(s) = stdin {
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(s.as_bytes());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: timed out after 30 s"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{what}: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(if stderr.is_empty() {
            format!("{what}: failed ({})", out.status)
        } else {
            stderr
        })
    }
}

fn dead_owner(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(NS_PREFIX) else {
        return false;
    };
    let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Delete the lab namespaces (and scratch folders) of processes that are gone (an earlier run
/// that was killed). Returns the namespace names removed. Those of live processes (another lab
/// running now) are left alone.
pub fn cleanup_stale() -> Vec<String> {
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten() {
            if dead_owner(&e.file_name().to_string_lossy()) && e.path().is_dir() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return removed;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !dead_owner(&name) {
            continue;
        }
        if run(
            Command::new("ip").args(["netns", "del", &name]),
            None,
            "ip netns del",
        )
        .is_ok()
        {
            removed.push(name);
        }
    }
    removed
}

/// Deletes the namespaces it holds when dropped (after the sockets in them are closed).
#[derive(Default)]
struct NsGuard {
    names: Vec<String>,
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            let _ = run(
                Command::new("ip").args(["netns", "del", n]),
                None,
                "ip netns del",
            );
        }
    }
}

struct Peer {
    sock: OwnedFd,
}

static LAB_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A router and its peers in network namespaces. Dropping it removes everything.
pub struct Lab {
    // Field order is drop order: sockets, then namespace handles, then the namespaces.
    peers: Vec<Peer>,
    raw: Vec<(bool, u8, OwnedFd)>,
    raw_failed: Vec<(bool, u8)>,
    router_ns: File,
    router: Router,
    opts: LabOptions,
    dir: PathBuf,
    barrier_seq: u16,
    /// Least time between two injected packets, in nanoseconds (see [`Lab::load`]).
    pace_ns: std::sync::atomic::AtomicU64,
    /// Namespace names (router first).
    pub names: Vec<String>,
    guard: NsGuard,
}

fn barrier_mac(seq: u16) -> Mac {
    [0x02, 0x77, 0x62, 0x61, (seq >> 8) as u8, seq as u8]
}

fn arp_probe(router_mac: Mac, seq: u16, tip: Ipv4Addr) -> Vec<u8> {
    let m = barrier_mac(seq);
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&router_mac);
    f.extend_from_slice(&m);
    f.extend_from_slice(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01]);
    f.extend_from_slice(&m);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tip.octets());
    f
}

fn is_barrier_reply(f: &[u8], seq: u16) -> bool {
    f.len() >= 22 && f[..6] == barrier_mac(seq) && f[12..14] == [0x08, 0x06] && f[20..22] == [0, 2]
}

/// Frames the kernel sends on its own: to a group address (ND, MLD) or ARP.
pub fn is_chatter(f: &[u8]) -> bool {
    f.len() < 14 || f[0] & 1 == 1 || f[12..14] == [0x08, 0x06]
}

impl Lab {
    /// Build the router and its peers. Fails with [`Error::Unavailable`] when not root or a
    /// tool is missing.
    pub fn new(router: &Router, opts: LabOptions) -> Result<Lab, Error> {
        if let Some(why) = unavailable() {
            return Err(Error::Unavailable(why));
        }
        cleanup_stale();
        let id = format!(
            "{NS_PREFIX}{}-{}",
            std::process::id(),
            LAB_SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let rname = format!("{id}-r");
        let pnames: Vec<String> = (0..router.ifaces.len())
            .map(|i| format!("{id}-p{i}"))
            .collect();
        let mut guard = NsGuard::default();
        let sysfail = |e: String| Error::System(e);
        // namespaces
        let mut batch = String::new();
        for n in std::iter::once(&rname).chain(pnames.iter()) {
            batch.push_str(&format!("netns add {n}\n"));
            guard.names.push(n.clone());
        }
        run(
            Command::new("ip").args(["-batch", "-"]),
            Some(&batch),
            "creating namespaces",
        )
        .map_err(sysfail)?;
        let open = |n: &str| {
            File::open(format!("/run/netns/{n}"))
                .map_err(|e| Error::System(format!("/run/netns/{n}: {e}")))
        };
        let router_ns = open(&rname)?;
        let peer_ns: Vec<File> = pnames.iter().map(|n| open(n)).collect::<Result<_, _>>()?;
        // sysctls before the interfaces exist, so that `default` applies to them
        sys::in_netns(&router_ns, || {
            for (k, v) in [
                ("net.ipv4.ip_forward", "1"),
                ("net.ipv4.conf.all.rp_filter", "0"),
                ("net.ipv4.conf.default.rp_filter", "0"),
                ("net.ipv4.conf.all.send_redirects", "0"),
                ("net.ipv4.conf.default.send_redirects", "0"),
                ("net.ipv6.conf.all.forwarding", "1"),
                ("net.ipv6.conf.default.forwarding", "1"),
                ("net.ipv6.conf.all.accept_dad", "0"),
                ("net.ipv6.conf.default.accept_dad", "0"),
                ("net.ipv6.conf.all.accept_ra", "0"),
                ("net.ipv6.conf.default.accept_ra", "0"),
                ("net.ipv6.conf.default.dad_transmits", "0"),
            ] {
                sys::sysctl(k, v)?;
            }
            Ok(())
        })
        .map_err(|e| Error::System(format!("router sysctls: {e}")))?;
        for ns in &peer_ns {
            sys::in_netns(ns, || {
                sys::sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
                sys::sysctl("net.ipv6.conf.default.disable_ipv6", "1")
            })
            .map_err(|e| Error::System(format!("peer sysctls: {e}")))?;
        }
        // veth pairs, created inside their namespaces
        let mut batch = String::new();
        for (i, f) in router.ifaces.iter().enumerate() {
            batch.push_str(&format!(
                "link add weirlabr{i} netns {rname} address {} type veth peer name weirlabp{i} netns {} address {}\n",
                mac_text(&f.mac),
                pnames[i],
                mac_text(&peer_mac(i))
            ));
        }
        run(
            Command::new("ip").args(["-batch", "-"]),
            Some(&batch),
            "creating veth pairs",
        )
        .map_err(sysfail)?;
        // the router: names, addresses, routes, neighbours
        let mut b = String::from("link set lo up\n");
        for (i, f) in router.ifaces.iter().enumerate() {
            b.push_str(&format!("link set weirlabr{i} name {}\n", f.name));
        }
        for f in &router.ifaces {
            b.push_str(&format!("link set {} up\n", f.name));
            for a in &f.addrs {
                b.push_str(&format!(
                    "addr add {a} dev {}{}\n",
                    f.name,
                    if a.is_v4() { "" } else { " nodad" }
                ));
            }
        }
        for r in router.routes.iter().filter(|r| !r.connected) {
            let via = r.via.map(|v| format!(" via {v}")).unwrap_or_default();
            b.push_str(&format!(
                "route add {}{via} dev {}\n",
                r.prefix, router.ifaces[r.dev].name
            ));
        }
        for (a, m, d) in &router.neighbors {
            b.push_str(&format!(
                "neigh add {a} lladdr {} dev {} nud permanent\n",
                mac_text(m),
                router.ifaces[*d].name
            ));
        }
        run(
            Command::new("ip").args(["-n", &rname, "-batch", "-"]),
            Some(&b),
            "configuring the router",
        )
        .map_err(sysfail)?;
        // each interface's IPv4 reverse path filter (Linux applies max(all, interface); `all`
        // is 0): written by path, since an interface name may hold a dot
        let rpf: Vec<(String, u8)> = router
            .ifaces
            .iter()
            .map(|f| (f.name.clone(), f.rp_filter.sysctl()))
            .collect();
        sys::in_netns(&router_ns, || {
            for (n, v) in &rpf {
                let p = format!("/proc/sys/net/ipv4/conf/{n}/rp_filter");
                std::fs::write(&p, v.to_string())
                    .map_err(|e| std::io::Error::new(e.kind(), format!("{p}: {e}")))?;
            }
            Ok(())
        })
        .map_err(|e| Error::System(format!("router rp_filter: {e}")))?;
        for (i, n) in pnames.iter().enumerate() {
            run(
                Command::new("ip").args(["-n", n, "link", "set", &format!("weirlabp{i}"), "up"]),
                None,
                "peer link up",
            )
            .map_err(sysfail)?;
        }
        // wait for carrier, check the interface indices the model assumes
        let names: Vec<(String, u32)> = router
            .ifaces
            .iter()
            .map(|f| (f.name.clone(), f.ifindex))
            .collect();
        sys::in_netns(&router_ns, || {
            let deadline = Instant::now() + Duration::from_secs(3);
            for (n, idx) in &names {
                let got = sys::ifindex(n)?;
                if got != *idx {
                    return Err(std::io::Error::other(format!(
                        "interface {n} has index {got}, the model assumes {idx}"
                    )));
                }
                while sys::if_flags(n)? & (libc::IFF_RUNNING as u32) == 0 {
                    if Instant::now() > deadline {
                        return Err(std::io::Error::other(format!(
                            "interface {n} did not come up"
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Ok(())
        })
        .map_err(|e| Error::System(format!("router interfaces: {e}")))?;
        let mut peers = Vec::new();
        for (i, ns) in peer_ns.iter().enumerate() {
            let sock = sys::in_netns(ns, || sys::packet_socket(&format!("weirlabp{i}")))
                .map_err(|e| Error::System(format!("capture socket on peer {i}: {e}")))?;
            peers.push(Peer { sock });
        }
        let dir = std::env::temp_dir().join(&id);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::System(format!("{}: {e}", dir.display())))?;
        let mut all = vec![rname];
        all.extend(pnames);
        Ok(Lab {
            peers,
            raw: Vec::new(),
            raw_failed: Vec::new(),
            router_ns,
            router: router.clone(),
            opts,
            dir,
            barrier_seq: 0,
            pace_ns: Default::default(),
            names: all,
            guard,
        })
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// A scratch directory that lives as long as the lab.
    pub fn scratch(&self) -> &Path {
        &self.dir
    }

    /// Replace the router's ruleset with the one in `rules`: `flush ruleset`, then the file.
    /// Err: nft's own message.
    ///
    /// Two transactions, not one: base chains of equal priority run newest registration
    /// first, and the NAT core's hook (one per family, registered with the family's first nat
    /// chain) would otherwise outlive the flush inside the transaction and keep the previous
    /// ruleset's place. Flushed apart, every ruleset is judged as a fresh load (a filter chain
    /// at `postrouting priority 100` before a nat table runs after the NAT, as it would on a
    /// freshly booted router; found by the campaign, seed 4, ruleset 439).
    pub fn load(&self, rules: &Path) -> Result<(), String> {
        let abs = std::fs::canonicalize(rules).map_err(|e| format!("{}: {e}", rules.display()))?;
        let s = abs.to_string_lossy();
        if s.contains('"') {
            return Err(format!(
                "{s}: the lab cannot load a ruleset whose path holds a double quote"
            ));
        }
        let wrapper = self.dir.join("load.nft");
        std::fs::write(&wrapper, format!("include \"{s}\"\n"))
            .map_err(|e| format!("{}: {e}", wrapper.display()))?;
        run(
            Command::new("ip").args(["netns", "exec", &self.names[0], "nft", "flush", "ruleset"]),
            None,
            "nft",
        )?;
        let inc = abs
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| ".".into());
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[0], "nft", "-I", &inc, "-f"])
            .arg(&wrapper);
        if let Some(p) = abs.parent() {
            cmd.current_dir(p);
        }
        run(&mut cmd, None, "nft")?;
        self.flush_conntrack();
        // `ct count` (nf_conncount) skips its collection when the list was collected in the
        // same jiffy, which depends on wall-clock timing; packets two jiffies apart (HZ 250
        // or more) make the kernel collect on every evaluation, as weir does
        let counts = std::fs::read_to_string(&abs).is_ok_and(|t| t.contains("ct count"));
        self.pace_ns.store(
            if counts { 10_000_000 } else { 0 },
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }

    /// Empty the router's connection table, so that a case starts with no connection from the
    /// previous one (`conntrack -F`; it fails harmlessly when nothing is tracked).
    pub fn flush_conntrack(&self) {
        let _ = Command::new("ip")
            .args(["netns", "exec", &self.names[0], "conntrack", "-F"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Replace the router's rules with iptables-save text (`v4`, for iptables-restore) and
    /// ip6tables-save text (`v6`): `nft flush ruleset` first, then each family restored with
    /// the backend's restore command (which replaces the tables the text names); a family
    /// without text gets the empty `filter` table. Err: the restore command's own message.
    pub fn load_iptables(
        &self,
        backend: IptBackend,
        v4: Option<&str>,
        v6: Option<&str>,
    ) -> Result<(), String> {
        self.flush()?;
        for (is6, text) in [(false, v4), (true, v6)] {
            let tool = backend.restore(is6);
            run(
                Command::new("ip").args(["netns", "exec", &self.names[0], tool]),
                Some(text.unwrap_or(EMPTY_FILTER)),
                tool,
            )
            .map_err(|e| format!("{tool}: {e}"))?;
        }
        self.flush_conntrack();
        Ok(())
    }

    /// Empty the router's iptables `filter` tables (both families) and its nft ruleset.
    pub fn flush_iptables(&self, backend: IptBackend) -> Result<(), String> {
        self.load_iptables(backend, None, None)?;
        self.flush()
    }

    /// Empty the router's ruleset.
    pub fn flush(&self) -> Result<(), String> {
        run(
            Command::new("ip").args(["netns", "exec", &self.names[0], "nft", "flush", "ruleset"]),
            None,
            "nft flush",
        )
        .map(|_| ())
    }

    fn ensure_raw(&mut self, want: &[(bool, u8)]) {
        for &(v6, proto) in want {
            if proto == 0
                || proto == 255
                || self.raw.iter().any(|r| (r.0, r.1) == (v6, proto))
                || self.raw_failed.contains(&(v6, proto))
            {
                continue;
            }
            match sys::in_netns(&self.router_ns, || sys::raw_ip_socket(v6, proto)) {
                Ok(s) => self.raw.push((v6, proto, s)),
                Err(_) => self.raw_failed.push((v6, proto)),
            }
        }
    }

    /// Inject the packets one at a time and collect what the router does with each.
    pub fn inject(&mut self, pkts: &[Prepared]) -> Result<Injection, Error> {
        // raw sockets for what may be delivered locally: any packet may be (a `dnat` or
        // `redirect` to the router's own address makes a forwarded destination local)
        let mut want = Vec::new();
        for p in pkts.iter().filter(|p| p.skip.is_none()) {
            let pm = PacketMeta::parse(&p.frame, LinkType::Ethernet);
            if crate::model::addrs(&pm).is_some() {
                want.push((pm.l3 == L3::Ipv6, pm.l4proto));
            }
        }
        self.ensure_raw(&want);
        let quiet = self.opts.quiet;
        let mut seq = self.barrier_seq;
        let this = &*self;
        let res = std::thread::scope(|s| {
            s.spawn(move || this.inject_pinned(pkts, quiet, &mut seq).map(|r| (r, seq)))
                .join()
        });
        let (inj, seq) = res.map_err(|_| Error::System("injection thread panicked".into()))??;
        self.barrier_seq = seq;
        Ok(inj)
    }

    fn inject_pinned(
        &self,
        pkts: &[Prepared],
        quiet: Duration,
        seq: &mut u16,
    ) -> Result<Injection, Error> {
        let t0 = Instant::now();
        sys::pin_to_current_cpu();
        let fds: Vec<i32> = self
            .peers
            .iter()
            .map(|p| p.sock.as_raw_fd())
            .chain(self.raw.iter().map(|r| r.2.as_raw_fd()))
            .collect();
        let mut buf = vec![0u8; 65536];
        let mut out = Injection::default();
        // Anything queued before the first packet belongs to nobody.
        let mut stale = Observed::default();
        self.read_ready(
            &(0..fds.len()).collect::<Vec<_>>(),
            &mut buf,
            &mut stale,
            None,
        )?;
        let mut last_send = Instant::now();
        for p in pkts {
            if sys::interrupted() {
                return Err(Error::Interrupted);
            }
            let mut ob = Observed::default();
            if p.skip.is_some() {
                ob.skipped = true;
                out.observed.push(ob);
                continue;
            }
            let pace =
                Duration::from_nanos(self.pace_ns.load(std::sync::atomic::Ordering::Relaxed));
            if let Some(wait) = (last_send + pace).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            last_send = Instant::now();
            let sock = &self.peers[p.iif].sock;
            sys::send(sock, &p.frame).map_err(|e| {
                Error::System(format!(
                    "injecting packet {} on {}: {e}",
                    p.index + 1,
                    self.router.ifaces[p.iif].name
                ))
            })?;
            let barrier = self.router.ipv4_addr(p.iif).map(|tip| {
                *seq = seq.wrapping_add(1);
                let f = arp_probe(self.router.ifaces[p.iif].mac, *seq, tip);
                sys::send(sock, &f).is_ok()
            });
            let barrier_sent = barrier == Some(true);
            let start = Instant::now();
            let mut last = start;
            loop {
                let now = Instant::now();
                let deadline = (last + quiet).min(start + quiet * 10);
                if now >= deadline {
                    break;
                }
                let ms = (deadline - now).as_micros().div_ceil(1000).max(1) as i32;
                let ready = sys::poll_readable(&fds, ms)
                    .map_err(|e| Error::System(format!("poll: {e}")))?;
                if ready.is_empty() {
                    if sys::interrupted() {
                        return Err(Error::Interrupted);
                    }
                    continue;
                }
                let before = ob.frames.len() + ob.local.len() + ob.chatter;
                let got = self.read_ready(
                    &ready,
                    &mut buf,
                    &mut ob,
                    barrier_sent.then_some((p.iif, *seq)),
                )?;
                if ob.frames.len() + ob.local.len() + ob.chatter > before {
                    last = Instant::now();
                }
                if got {
                    // everything the packet caused is queued by now: take it
                    self.read_ready(&(0..fds.len()).collect::<Vec<_>>(), &mut buf, &mut ob, None)?;
                    ob.barrier = true;
                    break;
                }
            }
            if !ob.barrier {
                out.barrier_misses += 1;
            }
            out.observed.push(ob);
        }
        // late frames: wait one quiet period, take what came
        std::thread::sleep(quiet);
        let mut late = Observed::default();
        self.read_ready(
            &(0..fds.len()).collect::<Vec<_>>(),
            &mut buf,
            &mut late,
            None,
        )?;
        out.late = late.frames;
        out.seconds = t0.elapsed().as_secs_f64();
        Ok(out)
    }

    /// Read every datagram queued on the given sockets (indices: peers first, then raw
    /// sockets). Returns true when the expected barrier reply was among them.
    fn read_ready(
        &self,
        which: &[usize],
        buf: &mut [u8],
        ob: &mut Observed,
        barrier: Option<(usize, u16)>,
    ) -> Result<bool, Error> {
        let mut got = false;
        let npeer = self.peers.len();
        for &i in which {
            loop {
                let (fd, raw) = if i < npeer {
                    (&self.peers[i].sock, None)
                } else {
                    (&self.raw[i - npeer].2, Some(&self.raw[i - npeer]))
                };
                let r = if raw.is_none() {
                    sys::recv_frame(fd, buf).map(|r| r.map(|n| (n, None)))
                } else {
                    sys::recv(fd, buf)
                };
                let r = r.map_err(|e| Error::System(format!("capture: {e}")))?;
                let Some((n, src)) = r else { break };
                let ts = sys::last_stamp_ns(fd);
                let data = buf[..n].to_vec();
                match raw {
                    None => {
                        if barrier
                            .is_some_and(|(iif, seq)| iif == i && is_barrier_reply(&data, seq))
                        {
                            got = true;
                        } else if is_chatter(&data) {
                            ob.chatter += 1;
                        } else {
                            ob.frames.push(Captured {
                                iface: i,
                                ts_ns: ts,
                                frame: data,
                            });
                        }
                    }
                    Some((v6, proto, _)) => ob.local.push(LocalCopy {
                        v6: *v6,
                        proto: *proto,
                        src,
                        data,
                        ts_ns: ts,
                    }),
                }
            }
        }
        Ok(got)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.peers.clear();
        self.raw.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
        // then the fields: the namespace handles, and the guard deletes the namespaces
        let _ = &self.guard;
    }
}

/// Namespaces of this process still present (for checks after a run).
pub fn own_namespaces() -> Vec<String> {
    let prefix = format!("{NS_PREFIX}{}-", std::process::id());
    std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_frames() {
        let f = arp_probe([2, 0, 0, 0, 0, 1], 0x0102, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(f.len(), 42);
        assert_eq!(
            &f[28..32],
            &[0, 0, 0, 0],
            "sender address 0.0.0.0: an address probe"
        );
        let mut reply = f.clone();
        reply[..6].copy_from_slice(&barrier_mac(0x0102));
        reply[20..22].copy_from_slice(&[0, 2]);
        assert!(is_barrier_reply(&reply, 0x0102));
        assert!(!is_barrier_reply(&reply, 0x0103));
        assert!(is_chatter(&f));
        assert!(is_chatter(&[
            0x33, 0x33, 0, 0, 0, 1, 2, 0, 0, 0, 0, 1, 0x86, 0xdd
        ]));
        assert!(!is_chatter(&weir_wire::build::udp4(
            Ipv4Addr::new(198, 18, 0, 1),
            Ipv4Addr::new(198, 18, 0, 2),
            1,
            2,
            b""
        )));
    }
}
