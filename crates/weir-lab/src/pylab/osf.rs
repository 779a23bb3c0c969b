//! `osf` in the kernel lab: the same fingerprints in the kernel (iptables' `nfnl_osf -f`) and
//! in weir ([`weir_engine::osf::OsfDb`]), and SYNs made to match each of them, exactly, with
//! a TTL one lower (`osf ttl loose` and `skip` still match, plain `osf` does not) and with
//! a window none expects ("unknown").
//!
//! The kernel keeps OS fingerprints in one list for the whole machine (nfnetlink_osf is not
//! per namespace): the lab loads its own file before the first `osf` rule and removes the
//! same fingerprints when it ends ([`Osf`]'s drop).

use std::net::Ipv4Addr;
use std::process::Command;
use weir_wire::build::{tcp_flags, Builder, Tcp};
use weir_wire::{LinkType, PacketMeta, L3};

/// The lab's fingerprints (pf.os): the genres and versions nftables' `ip/osf.t` names.
pub const LAB_PF_OS: &str = "\
# weir kernel lab: wsize:ttl:df:syn_size:options:genre:version:subtype:description
S20:64:1:60:M*,S,T,N,W7:Linux:3.0::Linux 3.0 and newer
65535:128:1:48:M*,N,N,S:Windows:XP::Windows XP
65535:64:1:64:M*,N,W6,N,N,T,S,E,E:MacOs:Sierra::macOS 10.12
";

/// The fingerprints loaded into the kernel while it lives.
pub struct Osf {
    file: std::path::PathBuf,
}

impl Osf {
    /// Load [`LAB_PF_OS`] into the kernel (any copy a crashed run left removed first).
    pub fn load() -> Result<Osf, String> {
        let file = std::env::temp_dir().join(format!("weir-lab-osf-{}.os", std::process::id()));
        std::fs::write(&file, LAB_PF_OS).map_err(|e| format!("{}: {e}", file.display()))?;
        let run = |del: bool| {
            let mut c = Command::new("nfnl_osf");
            c.arg("-f").arg(&file);
            if del {
                c.arg("-d");
            }
            c.output()
        };
        let _ = run(true);
        match run(false) {
            Ok(o) if o.status.success() => Ok(Osf { file }),
            Ok(o) => Err(format!(
                "nfnl_osf -f failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!(
                "nfnl_osf (Debian's iptables package) not found: {e}"
            )),
        }
    }

    /// The same fingerprints for weir.
    pub fn db() -> weir_engine::osf::OsfDb {
        weir_engine::osf::OsfDb::parse(LAB_PF_OS).expect("the lab's pf.os")
    }
}

impl Drop for Osf {
    fn drop(&mut self) {
        let _ = Command::new("nfnl_osf")
            .arg("-f")
            .arg(&self.file)
            .arg("-d")
            .output();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// SYNs for each lab fingerprint, between the addresses and ports of `like` (an IPv4 TCP
/// frame of the lab): one that matches, one with its TTL one lower, one with a window no
/// fingerprint has. None when `like` is no IPv4 TCP frame.
pub fn syns(like: &[u8]) -> Vec<Vec<u8>> {
    let pm = PacketMeta::parse(like, LinkType::Ethernet);
    if pm.l3 != L3::Ipv4 || pm.l4proto != 6 || like.len() < 14 {
        return Vec::new();
    }
    let (src, dst) = (
        Ipv4Addr::from(pm.saddr as u32),
        Ipv4Addr::from(pm.daddr as u32),
    );
    let mut macs = ([0u8; 6], [0u8; 6]);
    macs.0.copy_from_slice(&like[6..12]);
    macs.1.copy_from_slice(&like[0..6]);
    let mss = |m: u16| [2, 4, (m >> 8) as u8, m as u8];
    let ts = [8, 10, 0, 0, 0, 1, 0, 0, 0, 0];
    // (ttl, window, options) as each fingerprint has them
    let linux: Vec<u8> = [&mss(1460)[..], &[4, 2], &ts, &[1], &[3, 3, 7]].concat();
    let windows: Vec<u8> = [&mss(1460)[..], &[1, 1], &[4, 2]].concat();
    let macos: Vec<u8> = [
        &mss(1460)[..],
        &[1],
        &[3, 3, 6],
        &[1, 1],
        &ts,
        &[4, 2],
        &[0, 0],
    ]
    .concat();
    let kinds: [(u8, u16, &[u8]); 3] = [
        (64, 20 * 1460, &linux),
        (128, 65535, &windows),
        (64, 65535, &macos),
    ];
    let mut out = Vec::new();
    for (i, (ttl, win, opts)) in kinds.into_iter().enumerate() {
        for (t, w) in [(ttl, win), (ttl - 1, win), (ttl, 1234)] {
            let tcp = Tcp::new(pm.sport.wrapping_add(i as u16), pm.dport, tcp_flags::SYN)
                .window(w)
                .options(opts);
            out.push(
                Builder::new()
                    .macs(macs.0, macs.1)
                    .ttl(t)
                    .dont_fragment()
                    .tcp(src, dst, &tcp, b""),
            );
        }
    }
    out
}
