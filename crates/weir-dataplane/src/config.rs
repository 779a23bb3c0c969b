//! The configuration of `weir run`: a TOML file, read into typed settings ([`Config`]) and
//! checked before anything starts; the inline router it describes ([`Config::router`]).

use anyhow::Context;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use weir_router::{Port, PortAddr, Route, Router, Routes};
use weir_wire::{Addr, Mac};

/// Who forwards: the kernel (weir gives NFQUEUE verdicts) or weir itself.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(try_from = "String")]
pub enum Mode {
    /// The kernel routes and forwards; weir filters the packets it queues.
    Nfqueue,
    /// Weir forwards between its interfaces itself (AF_XDP or AF_PACKET).
    Inline,
}

impl TryFrom<String> for Mode {
    type Error = String;
    fn try_from(s: String) -> Result<Mode, String> {
        match s.as_str() {
            "nfqueue" => Ok(Mode::Nfqueue),
            "inline" => Ok(Mode::Inline),
            _ => Err(format!(
                "mode '{s}': \"nfqueue\" (the kernel forwards) or \"inline\" (weir forwards, AF_XDP or AF_PACKET)"
            )),
        }
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nfqueue => "nfqueue",
            Mode::Inline => "inline",
        }
    }
}

/// How inline mode reads and writes frames.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(try_from = "String")]
pub enum Io {
    /// AF_XDP where the kernel allows it, AF_PACKET otherwise.
    #[default]
    Auto,
    Xdp,
    Afpacket,
}

impl TryFrom<String> for Io {
    type Error = String;
    fn try_from(s: String) -> Result<Io, String> {
        match s.as_str() {
            "auto" => Ok(Io::Auto),
            "xdp" => Ok(Io::Xdp),
            "afpacket" => Ok(Io::Afpacket),
            _ => Err(format!("io '{s}': auto, xdp or afpacket")),
        }
    }
}

/// How much of a queued packet NFQUEUE copies to weir.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(try_from = "String")]
pub enum Copy {
    /// Headers only unless the ruleset rewrites packets.
    #[default]
    Auto,
    Headers,
    Packet,
}

impl TryFrom<String> for Copy {
    type Error = String;
    fn try_from(s: String) -> Result<Copy, String> {
        match s.as_str() {
            "auto" => Ok(Copy::Auto),
            "headers" => Ok(Copy::Headers),
            "packet" => Ok(Copy::Packet),
            _ => Err(format!("nfqueue.copy '{s}': auto, headers or packet")),
        }
    }
}

/// Reverse path filtering (anti-spoofing, BCP 38), as Linux's `rp_filter` sysctl: `strict`
/// (1): a packet's source must be routed back out of the interface it came in on; `loose`
/// (2): its source must have a route at all; `off` (0, the default). See
/// [`weir_router::RpFilter`].
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RpFilter {
    #[default]
    Off,
    Loose,
    Strict,
}

impl From<RpFilter> for weir_router::RpFilter {
    fn from(f: RpFilter) -> Self {
        match f {
            RpFilter::Off => weir_router::RpFilter::Off,
            RpFilter::Loose => weir_router::RpFilter::Loose,
            RpFilter::Strict => weir_router::RpFilter::Strict,
        }
    }
}

/// A configuration file.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The ruleset file (relative to the configuration file).
    pub ruleset: PathBuf,
    pub mode: Mode,
    #[serde(default)]
    pub nfqueue: NfqConfig,
    #[serde(default)]
    pub control: ControlConfig,
    #[serde(default)]
    pub conntrack: CtConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Inline mode: the interfaces weir forwards between.
    #[serde(default)]
    pub interface: Vec<IfaceConfig>,
    /// Inline mode: the routing table.
    #[serde(default)]
    pub route: Vec<RouteConfig>,
    /// Inline mode: next hops' MAC addresses.
    #[serde(default)]
    pub neighbour: Vec<NeighConfig>,
    /// Inline mode: how frames are read and written.
    #[serde(default)]
    pub io: Io,
    /// Inline mode: worker threads (one per core). With more than one, each interface is
    /// read by an AF_PACKET fanout group whose BPF program sends both directions of a
    /// connection to the same worker.
    #[serde(default = "one")]
    pub workers: u16,
    /// Inline mode: packets for the router's own addresses that its `input` chains accept
    /// are handed to the kernel's stack (its services answer; what it sends is tracked);
    /// off: they are dropped.
    #[serde(default = "yes")]
    pub local_delivery: bool,
    /// The OS fingerprints `osf` expressions compare TCP SYNs with: a `pf.os` file (the
    /// format iptables' `nfnl_osf -f` loads into the kernel; relative to this file). None:
    /// no fingerprint, every SYN's OS is "unknown", as in a kernel nobody gave any.
    #[serde(default)]
    pub osf: Option<PathBuf>,
    /// Per-flow scripts: the profiles `queue` statements hand packets to
    /// (`weir_script::config`).
    #[serde(default)]
    pub scripts: Option<weir_script::config::ScriptsConfig>,
    /// The configuration file's directory: the files it names are relative to it.
    #[serde(skip)]
    pub dir: PathBuf,
}

fn one() -> u16 {
    1
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct IfaceConfig {
    pub name: String,
    /// The router's own addresses on it, each with its subnet's length if given
    /// (`198.18.30.1/24`; masquerade uses the first of a family).
    #[serde(default)]
    pub address: Vec<String>,
    /// Reverse path filtering of the packets arriving on it (Linux's `rp_filter`).
    #[serde(default)]
    pub rp_filter: RpFilter,
    /// AF_PACKET: what weir sends out of it goes through its queueing discipline, its tc
    /// egress hook and its taps (`tcpdump -i` sees it). Off (the default), frames go
    /// straight to the driver (`PACKET_QDISC_BYPASS`), as AF_XDP sends them: about a quarter less
    /// CPU per forwarded packet on a veth.
    #[serde(default)]
    pub qdisc: bool,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub prefix: String,
    pub interface: String,
    /// The next hop (absent: the destination is on the link).
    pub via: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct NeighConfig {
    pub address: String,
    pub mac: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Where Prometheus scrapes `/metrics` ("" turns it off).
    pub address: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            address: "127.0.0.1:9560".into(),
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct NfqConfig {
    pub queue: u16,
    /// Worker threads, one queue each (`queue` .. `queue + workers - 1`); the kernel spreads
    /// connections over them by address (`--queue-balance`: both directions of a connection
    /// reach the same worker).
    pub workers: u16,
    /// Install (and remove at exit) the iptables rules that queue the packets.
    pub install: bool,
    /// When the ruleset only hands packets to per-flow scripts (see
    /// [`crate::scope::scripts_only`]), the installed rules queue only what the scripts'
    /// profiles can act on (their ports, the first packets of each connection); false:
    /// every packet, as for any ruleset.
    pub narrow: bool,
    pub fail_open: bool,
    pub max_len: u32,
    pub batch: usize,
    pub copy: Copy,
}

impl Default for NfqConfig {
    fn default() -> Self {
        NfqConfig {
            queue: 0,
            workers: 1,
            install: true,
            narrow: true,
            fail_open: true,
            max_len: 4096,
            batch: 64,
            copy: Copy::Auto,
        }
    }
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    pub socket: Option<PathBuf>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct CtConfig {
    pub max_entries: usize,
    /// Pick up TCP connections from a packet other than a SYN (Linux's
    /// `nf_conntrack_tcp_loose`, on by default). Off for a SYN proxy: the client's ACK must
    /// then be `ct state invalid` to reach `synproxy`.
    pub tcp_loose: bool,
}

impl Default for CtConfig {
    fn default() -> Self {
        CtConfig {
            max_entries: 262_144,
            tcp_loose: true,
        }
    }
}

impl Config {
    /// Read a configuration file; the ruleset's path, relative to the file's folder.
    pub fn read(path: &Path) -> anyhow::Result<(Config, PathBuf)> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the configuration {}", path.display()))?;
        let mut cfg: Config =
            toml::from_str(&text).with_context(|| format!("configuration {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        cfg.dir = base.to_path_buf();
        cfg.check()?;
        let rules = base.join(&cfg.ruleset);
        Ok((cfg, rules))
    }

    /// What the file may say but not mean.
    fn check(&self) -> anyhow::Result<()> {
        let inline = self.mode == Mode::Inline;
        anyhow::ensure!(
            inline || self.workers == 1,
            "workers: inline mode only (nfqueue mode: nfqueue.workers, one queue each)"
        );
        let w = self.worker_count();
        self.scripts()?;
        if inline {
            anyhow::ensure!((1..=64).contains(&w), "workers: 1 to 64");
        } else {
            anyhow::ensure!(
                (1..=64).contains(&w) && self.nfqueue.queue.checked_add(w - 1).is_some(),
                "nfqueue.workers: 1 to 64 (queues {} and up)",
                self.nfqueue.queue
            );
        }
        Ok(())
    }

    /// The OS fingerprints of `osf = "FILE"` (None: not configured); an error names the
    /// file and the line.
    pub fn osf_db(&self) -> anyhow::Result<Option<std::sync::Arc<weir_engine::osf::OsfDb>>> {
        let Some(f) = &self.osf else {
            return Ok(None);
        };
        let path = self.dir.join(f);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("osf: {}: {e}", path.display()))?;
        let db = weir_engine::osf::OsfDb::parse(&text)
            .map_err(|e| anyhow::anyhow!("osf: {}: {e}", path.display()))?;
        Ok(Some(std::sync::Arc::new(db)))
    }

    /// Per-flow scripts as configured (None: no `[scripts]`); every error names the profile
    /// and the instance.
    pub fn scripts(&self) -> anyhow::Result<Option<weir_script::Scripts>> {
        match &self.scripts {
            None => Ok(None),
            Some(s) => weir_script::Scripts::new(s, &self.dir)
                .map(Some)
                .map_err(|e| anyhow::anyhow!("scripts: {e}")),
        }
    }

    /// The queues per-flow scripts listen on.
    pub fn script_queues(&self) -> std::collections::BTreeSet<u16> {
        self.scripts
            .iter()
            .flat_map(|s| s.profile.iter().map(|p| p.queue))
            .collect()
    }

    /// Worker threads: inline workers, or one per NFQUEUE queue.
    pub fn worker_count(&self) -> u16 {
        match self.mode {
            Mode::Inline => self.workers,
            Mode::Nfqueue => self.nfqueue.workers,
        }
    }

    /// The inline interfaces' names.
    pub fn interface_names(&self) -> Vec<String> {
        self.interface.iter().map(|i| i.name.clone()).collect()
    }

    /// The inline router of the configuration: its ports (their MACs and MTUs are the
    /// links', filled in when the links are open), its routes and the configured neighbours.
    pub fn router(&self) -> anyhow::Result<Router> {
        anyhow::ensure!(
            self.interface.len() >= 2,
            "inline mode: at least two [[interface]] sections"
        );
        let port_of = |name: &str| {
            self.interface
                .iter()
                .position(|i| i.name == name)
                .ok_or_else(|| {
                    anyhow::anyhow!("route via interface '{name}': not an [[interface]]")
                })
        };
        let mut ports = Vec::new();
        for i in &self.interface {
            let addrs = i
                .address
                .iter()
                .map(|a| parse_port_addr(a))
                .collect::<anyhow::Result<Vec<_>>>()?;
            ports.push(
                Port::new(&i.name)
                    .with_addrs(addrs)
                    .with_rp_filter(i.rp_filter.into())
                    .with_ifindex(ifindex(&i.name))
                    .with_group(netdev_group(&i.name)),
            );
        }
        let mut routes = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for r in &self.route {
            let (a, l) = r.prefix.split_once('/').unwrap_or((&r.prefix, ""));
            let net = parse_addr(a)?;
            let max = net.family().bits();
            let len: u8 = if l.is_empty() {
                max
            } else {
                l.parse()
                    .ok()
                    .filter(|&x| x <= max)
                    .with_context(|| format!("route {}: prefix length 0 to {max}", r.prefix))?
            };
            let via = r.via.as_deref().map(parse_addr).transpose()?;
            anyhow::ensure!(
                via.is_none_or(|v| v.family() == net.family()),
                "route {}: the next hop is of the other family",
                r.prefix
            );
            let route = Route::new(net, len, port_of(&r.interface)?, via);
            anyhow::ensure!(
                seen.insert((route.net, route.len)),
                "route {}: configured twice",
                r.prefix
            );
            routes.push(route);
        }
        let routes = Routes::new(routes).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut router = Router::new(ports, routes);
        for n in &self.neighbour {
            let a = parse_addr(&n.address)?;
            anyhow::ensure!(
                router.neighbours().fits(a),
                "neighbour {}: more than {} neighbours",
                n.address,
                weir_router::neigh::MAX_NEIGHBOURS
            );
            router.set_neighbour(a, n.mac.parse::<Mac>()?);
        }
        router.set_local_delivery(self.local_delivery);
        Ok(router)
    }
}

pub fn parse_addr(s: &str) -> anyhow::Result<Addr> {
    s.parse::<Addr>()
        .map_err(|_| anyhow::anyhow!("'{s}': an IPv4 or IPv6 address"))
}

/// One of the router's addresses, with the length of its subnet when given
/// (`198.18.30.1/24`): a subnet's directed broadcast and subnet-router anycast address are
/// then the router's too.
fn parse_port_addr(s: &str) -> anyhow::Result<PortAddr> {
    let (a, l) = s.split_once('/').unwrap_or((s, ""));
    let addr = parse_addr(a)?;
    let max = addr.family().bits();
    if l.is_empty() {
        return Ok(PortAddr::host(addr));
    }
    let len = l
        .parse()
        .ok()
        .filter(|&x| x <= max)
        .with_context(|| format!("address {s}: prefix length 0 to {max}"))?;
    Ok(PortAddr { addr, len })
}

/// An interface's index in the kernel (`meta iif` / `oif` compare it), 0 when there is no
/// such interface (the router's ports are checked elsewhere).
pub fn ifindex(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: if_nametoindex reads the NUL-terminated name and returns 0 on failure.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// An interface's device group (`/sys/class/net/NAME/netdev_group`; the kernel's default 0).
pub fn netdev_group(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/netdev_group"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The router's ports carry the kernel's index and group of their interface (`meta
    /// iif`, `iifgroup`): lo is 1 in every namespace, in group 0.
    #[test]
    fn ports_know_their_index_and_group() {
        assert_eq!(ifindex("lo"), 1);
        assert_eq!(netdev_group("lo"), 0);
        assert_eq!(ifindex("weir-no-such-if"), 0);
    }

    fn parse(text: &str) -> Result<Config, String> {
        toml::from_str::<Config>(text)
            .map_err(|e| e.to_string())
            .and_then(|c| c.check().map(|_| c).map_err(|e| e.to_string()))
    }

    #[test]
    fn typed_settings_and_their_errors() {
        let c =
            parse("ruleset = \"r.nft\"\nmode = \"inline\"\nio = \"xdp\"\nworkers = 2\n").unwrap();
        assert_eq!((c.mode, c.io, c.worker_count()), (Mode::Inline, Io::Xdp, 2));
        let c = parse(
            "ruleset = \"r.nft\"\nmode = \"nfqueue\"\n[nfqueue]\ncopy = \"headers\"\nworkers = 3\n",
        )
        .unwrap();
        assert_eq!((c.nfqueue.copy, c.worker_count()), (Copy::Headers, 3));
        for (text, want) in [
            ("ruleset = \"r\"\nmode = \"bypass\"\n", "\"nfqueue\""),
            ("ruleset = \"r\"\nmode = \"inline\"\nio = \"dpdk\"\n", "auto, xdp or afpacket"),
            ("ruleset = \"r\"\nmode = \"nfqueue\"\n[nfqueue]\ncopy = \"all\"\n", "auto, headers or packet"),
            ("ruleset = \"r\"\nmode = \"nfqueue\"\nworkers = 2\n", "inline mode only"),
            ("ruleset = \"r\"\nmode = \"nfqueue\"\n[nfqueue]\nqueue = 65535\nworkers = 2\n", "nfqueue.workers"),
            ("ruleset = \"r\"\nmode = \"inline\"\nworkers = 0\n", "workers: 1 to 64"),
            ("ruleset = \"r\"\nmode = \"inline\"\n[[interface]]\nname = \"a\"\nrp_filter = \"on\"\n", "rp_filter"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
