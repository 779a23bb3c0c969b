//! Offloads on the real kernel: two network namespaces joined by a veth pair with the default
//! offloads (tx checksum, TSO, GSO on). The receiving end opens weir's TPACKET_V3 ring ports
//! (one with the virtio-net header, one without) while the sending side makes TCP (a SYN to
//! an address nobody has, then 256 KiB over a real connection: super-frames) and UDP (plain
//! datagrams and a `UDP_SEGMENT` one). The frames must be reported partial / GSO as the kernel
//! has them, and after `weir_wire::offload` completes or cuts them their checksums must
//! verify and the TCP stream must come out whole. Then weir sends a super-frame itself with
//! a virtio-net header: passed through whole while TSO is on, cut by the kernel's GSO with
//! TSO off, into exactly the frames `weir_wire::offload::segment_tcp` makes.
//!
//! Needs root and iproute2 (`ip`); the second part also ethtool. Prints SKIP and a reason,
//! and passes, when it cannot run. Namespaces `weirof-*`, addresses in 198.18.0.0/15, all
//! deleted at the end (also on failure); every wait is bounded.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use weir_io::afpacket::{GsoKind, Port, RingConfig, RxOffload, VnetHdr};
use weir_wire::build::{tcp_flags as tf, Builder, Tcp};
use weir_wire::offload::{self, CsumState};
use weir_wire::{LinkType, PacketMeta, L3};

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// An address nobody has: A reaches it through a static neighbour entry (B's MAC).
const NOWHERE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
const DEV_A: &str = "weirof-a0";
const DEV_B: &str = "weirof-b0";
const STREAM: usize = 256 * 1024;
const TCP_PORT: u16 = 5001;
const UDP_PORT: u16 = 9999;
/// Blocks of 16 KiB: frames longer than 16384 - 48 - 82 bytes are cut.
const SMALL: RingConfig = RingConfig {
    block_size: 16384,
    blocks: 256,
    vnet_hdr: false,
};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Two namespaces and the veth pair between them; deleted on drop.
struct Lab {
    a: String,
    b: String,
}

impl Lab {
    fn new() -> Result<Lab, String> {
        let pid = std::process::id();
        let lab = Lab {
            a: format!("weirof-a-{pid}"),
            b: format!("weirof-b-{pid}"),
        };
        let (a, b) = (lab.a.as_str(), lab.b.as_str());
        run(&["ip", "netns", "add", a])?;
        run(&["ip", "netns", "add", b])?;
        for ns in [a, b] {
            // IPv4 only: no IPv6 addresses (nor their neighbour discovery) on the lab's links
            run(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sh",
                "-c",
                "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; \
                 echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6",
            ])?;
        }
        run(&[
            "ip", "link", "add", DEV_A, "netns", a, "type", "veth", "peer", "name", DEV_B, "netns",
            b,
        ])?;
        run(&["ip", "-n", a, "addr", "add", "198.18.0.1/24", "dev", DEV_A])?;
        run(&["ip", "-n", b, "addr", "add", "198.18.0.2/24", "dev", DEV_B])?;
        for (ns, dev) in [(a, DEV_A), (b, DEV_B)] {
            run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
            run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(lab)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Run `f` on a thread that has entered network namespace `ns` (`setns` moves only the
/// calling thread; sockets it opens stay in that namespace).
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<Result<T, String>> {
    let path = format!("/run/netns/{ns}");
    thread::spawn(move || {
        let file = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: setns with a descriptor of a namespace file we hold open; it changes only
        // this thread's network namespace.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
        }
        Ok(f())
    })
}

fn join<T>(h: JoinHandle<Result<T, String>>) -> T {
    match h.join() {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => panic!("{e}"),
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// A frame as a ring port gave it.
#[derive(Clone, Debug)]
struct Got {
    bytes: Vec<u8>,
    truncated: bool,
    off: RxOffload,
}

/// Read the ring ports until `stop` (or 30 s), keeping every frame.
fn capture(
    vnet: &mut Port,
    plain: &mut Port,
    small: &mut Port,
    stop: &AtomicBool,
) -> (Vec<Got>, Vec<Got>, Vec<Got>, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut gv, mut gp, mut gs) = (Vec::new(), Vec::new(), Vec::new());
    let drain = |p: &mut Port, out: &mut Vec<Got>| -> usize {
        let n = p.recv_batch().expect("ring receive");
        for i in 0..n {
            let off = p.rx_offload(i);
            let (f, truncated) = p.frame_mut(i);
            out.push(Got {
                bytes: f.to_vec(),
                truncated,
                off,
            });
        }
        p.recv_done();
        n
    };
    loop {
        let n = drain(vnet, &mut gv) + drain(plain, &mut gp) + drain(small, &mut gs);
        if n == 0 {
            if stop.load(Ordering::Acquire) || Instant::now() > deadline {
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
    }
    let drops = vnet.ring_drops() + plain.ring_drops();
    (gv, gp, gs, drops)
}

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// A frame of the capture that A sent: its meta, if IPv4 from A.
fn from_a(g: &Got) -> Option<PacketMeta> {
    let m = PacketMeta::parse(&g.bytes, LinkType::Ethernet);
    (m.l3 == L3::Ipv4 && m.saddr == u32::from(A) as u128 && m.has_l4).then_some(m)
}

fn tcp_seq(f: &[u8], m: &PacketMeta) -> u32 {
    let l4 = m.l4_off as usize;
    u32::from_be_bytes(f[l4 + 4..l4 + 8].try_into().unwrap())
}

#[test]
fn offloaded_frames_on_a_veth_pair() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIP: offload lab needs root (network namespaces, AF_PACKET)");
        return;
    }
    if !have("ip") {
        println!("SKIP: iproute2 (ip) is not installed");
        return;
    }
    let lab = match Lab::new() {
        Ok(l) => l,
        Err(e) => {
            println!("SKIP: cannot make the namespace lab: {e}");
            return;
        }
    };
    if have("ethtool") {
        if let Ok(k) = run(&["ip", "netns", "exec", &lab.a, "ethtool", "-k", DEV_A]) {
            for l in k.lines().filter(|l| {
                l.starts_with("tx-checksumming")
                    || l.starts_with("tcp-segmentation-offload")
                    || l.starts_with("generic-segmentation-offload")
            }) {
                println!("{DEV_A} {l}");
            }
        }
    }

    // --- the receiving side: weir's ring ports on B's end, read until told to stop
    let stop = Arc::new(AtomicBool::new(false));
    let (mac_tx, mac_rx) = mpsc::channel();
    let st = stop.clone();
    let ring = in_ns(&lab.b, move || {
        let cfg = RingConfig {
            vnet_hdr: true,
            ..RingConfig::default()
        };
        let mut vnet = Port::open_ring_with(DEV_B, cfg).expect("ring with vnet header");
        let mut plain = Port::open_ring(DEV_B).expect("ring");
        // (the header is on the socket that reads; the port sends on one without)
        assert!(!vnet.has_vnet_hdr() && !plain.has_vnet_hdr());
        // A ring of small blocks: frames longer than a block are cut.
        let mut small = Port::open_ring_with(DEV_B, SMALL).expect("ring of small blocks");
        mac_tx.send(vnet.mac).unwrap();
        capture(&mut vnet, &mut plain, &mut small, &st)
    });
    let mac_b = mac_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("ring ports open");
    let mac_b_s = mac_b
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    run(&[
        "ip",
        "-n",
        &lab.a,
        "neigh",
        "add",
        "198.18.0.3",
        "lladdr",
        &mac_b_s,
        "dev",
        DEV_A,
    ])
    .expect("static neighbour");

    // --- B's listener: reads the stream and checks it
    let (ready_tx, ready_rx) = mpsc::channel();
    let server = in_ns(&lab.b, move || -> Result<usize, String> {
        let l = TcpListener::bind((B, TCP_PORT)).map_err(|e| e.to_string())?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        ready_tx.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut c = loop {
            match l.accept() {
                Ok((c, _)) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err("no connection".into());
                    }
                    thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        c.set_nonblocking(false).map_err(|e| e.to_string())?;
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut all = Vec::new();
        c.read_to_end(&mut all).map_err(|e| e.to_string())?;
        if all.iter().enumerate().any(|(i, b)| *b != pattern(i)) {
            return Err("stream corrupted".into());
        }
        Ok(all.len())
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("listener up");

    // --- A: a SYN to nowhere, the stream, UDP datagrams, a UDP_SEGMENT datagram
    let client = in_ns(&lab.a, move || -> Result<bool, String> {
        let nowhere = SocketAddr::from((NOWHERE, 80));
        let _ = TcpStream::connect_timeout(&nowhere, Duration::from_millis(300));
        let mut c = TcpStream::connect_timeout(&(B, TCP_PORT).into(), Duration::from_secs(5))
            .map_err(|e| format!("connect: {e}"))?;
        c.set_write_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let data: Vec<u8> = (0..STREAM).map(pattern).collect();
        c.write_all(&data).map_err(|e| format!("write: {e}"))?;
        c.shutdown(std::net::Shutdown::Write)
            .map_err(|e| e.to_string())?;
        let u = UdpSocket::bind((A, 0)).map_err(|e| e.to_string())?;
        for i in 0..3u8 {
            u.send_to(&[i; 200], (B, UDP_PORT))
                .map_err(|e| e.to_string())?;
        }
        // UDP_SEGMENT (Linux 4.18): one send of 4500 bytes in datagrams of 1000.
        let seg: i32 = 1000;
        // SAFETY: setsockopt with a live i32 and its size on our own socket.
        let gso = unsafe {
            libc::setsockopt(
                u.as_raw_fd(),
                libc::SOL_UDP,
                103, // UDP_SEGMENT
                &seg as *const i32 as *const libc::c_void,
                4,
            )
        } == 0;
        if gso {
            u.send_to(&[7u8; 4500], (B, UDP_PORT + 1))
                .map_err(|e| e.to_string())?;
        }
        Ok(gso)
    });
    let udp_gso_sent = join(client).expect("client");
    let got = join(server).expect("server");
    assert_eq!(got, STREAM, "B read the whole stream");

    // --- weir sends a super-frame with a virtio-net header: first with TSO on (passed
    // through whole), then with TSO off (cut by the kernel's GSO)
    let tx_part = have("ethtool");
    let mut sent_supers: Vec<(u16, Vec<u8>)> = Vec::new();
    if tx_part {
        let build = move |mac_a: [u8; 6], sport: u16, id: u16, n: usize| {
            let payload: Vec<u8> = (0..n).map(|i| (i * 3) as u8).collect();
            let mut f = Builder::new()
                .macs(mac_a, mac_b)
                .ip_id(id)
                .dont_fragment()
                .tcp(
                    A,
                    B,
                    &Tcp::new(sport, 9, tf::ACK | tf::PSH).seq(77).ack(1),
                    &payload,
                );
            let m = PacketMeta::parse(&f, LinkType::Ethernet);
            offload::set_partial_checksum(&mut f, &m).unwrap();
            f
        };
        let tx = in_ns(&lab.a, move || -> Result<(Vec<u8>, Port), String> {
            let mut p = Port::open_tx_vnet(DEV_A).map_err(|e| e.to_string())?;
            let f = build(p.mac, 40001, 0x4200, 10 * 1448 + 500);
            let h = VnetHdr::tcp_gso(false, 34, 20, 1448);
            p.send_offload(&[(&f, h)]).map_err(|e| e.to_string())?;
            Ok((f, p))
        });
        let (f1, tx_port) = join(tx).expect("send with vnet header");
        assert_eq!(tx_port.stats.send_errors, 0, "kernel took the super-frame");
        sent_supers.push((40001, f1));
        thread::sleep(Duration::from_millis(100));
        run(&[
            "ip", "netns", "exec", &lab.a, "ethtool", "-K", DEV_A, "tso", "off",
        ])
        .expect("tso off");
        let tx = in_ns(&lab.a, move || -> Result<Vec<u8>, String> {
            let mut p = tx_port;
            let f = build(p.mac, 40002, 0xfffe, 10 * 1448 + 500);
            let h = VnetHdr::tcp_gso(false, 34, 20, 1448);
            p.send_offload(&[(&f, h)]).map_err(|e| e.to_string())?;
            if p.stats.send_errors != 0 {
                return Err(format!(
                    "kernel refused the super-frame: {:?}",
                    p.last_send_error()
                ));
            }
            // an ordinary frame on the same socket: an empty header is added
            let mut small = build(p.mac, 40003, 1, 100);
            let m = PacketMeta::parse(&small, LinkType::Ethernet);
            offload::complete_checksum(&mut small, &m).unwrap();
            p.send_batch(&[&small]).map_err(|e| e.to_string())?;
            if p.stats.send_errors != 0 {
                return Err("kernel refused a plain frame on the vnet socket".into());
            }
            Ok(f)
        });
        sent_supers.push((40002, join(tx).expect("send with TSO off")));
    } else {
        println!("SKIP (second part): ethtool is not installed; not sending with a vnet header");
    }

    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Release);
    let (gv, gp, gs, drops) = join(ring);
    drop(lab);
    println!(
        "captured {} frames with the vnet header, {} without; ring drops {drops}",
        gv.len(),
        gp.len()
    );

    // ---------------------------------------------------------------- checks
    // (1) The SYN to nowhere: partial, as Linux leaves it.
    let syns: Vec<&Got> = gv
        .iter()
        .filter(|g| {
            from_a(g).is_some_and(|m| {
                m.daddr == u32::from(NOWHERE) as u128 && m.tcp_flags & tf::SYN != 0
            })
        })
        .collect();
    assert!(!syns.is_empty(), "the SYN to {NOWHERE} was seen");
    for g in &syns {
        let m = from_a(g).unwrap();
        assert!(g.off.csum_partial, "SYN reported partial: {:?}", g.off);
        assert!(offload::looks_partial(&g.bytes, &m), "SYN looks partial");
        let v = g.off.vnet.expect("vnet header");
        assert_eq!(v.csum(), Some((34, 16)), "{v:?}");
        assert!(g.off.gso.is_none());
    }

    // (2) Every TCP/UDP frame from A: the kernel's word and the checksum field agree; after
    // completion the checksum verifies; the device's way (csum_start/offset) gives the same.
    let mut partial_seen = 0;
    for g in gv.iter().chain(gp.iter()) {
        let Some(m) = from_a(g) else { continue };
        if !matches!(m.l4proto, 6 | 17) {
            continue;
        }
        assert!(!g.truncated, "frame of {} bytes taken whole", g.bytes.len());
        let state = offload::classify_checksum(&g.bytes, &m).unwrap();
        if g.off.csum_partial {
            partial_seen += 1;
            assert_eq!(
                state,
                CsumState::Partial,
                "kernel says partial: {:?}",
                g.off
            );
            let mut done = g.bytes.clone();
            offload::complete_checksum(&mut done, &m).unwrap();
            assert_eq!(offload::classify_checksum(&done, &m), Ok(CsumState::Valid));
            assert!(m.ipv4_checksum_ok(&done));
            if let Some((start, off)) = g.off.vnet.and_then(|v| v.csum()) {
                let mut dev = g.bytes.clone();
                offload::finish_partial(&mut dev, m.l3_end(), start as usize, off as usize)
                    .unwrap();
                assert_eq!(dev, done, "finishing at csum_start/offset = from scratch");
            }
        } else {
            assert_eq!(state, CsumState::Valid, "not partial: must verify");
        }
    }
    assert!(partial_seen > 0);
    assert!(
        gv.iter().all(|g| g.off.vnet.is_some()),
        "every frame has its vnet header"
    );
    assert!(gp.iter().all(|g| g.off.vnet.is_none()));

    // (3) The stream's super-frames: reported GSO, cut into frames that fit the MTU and
    // verify, and the segments carry the stream at the right sequence numbers.
    let isn = syns_of(&gv, TCP_PORT).expect("the stream's SYN");
    let mut covered = vec![false; STREAM];
    let mut supers = 0;
    for g in &gv {
        let Some(m) = from_a(g) else { continue };
        if m.l4proto != 6 || m.dport != TCP_PORT {
            continue;
        }
        let (_, pn) = m.payload(&g.bytes).unwrap();
        let segs = if pn > 1448 {
            supers += 1;
            assert!(g.off.csum_partial && g.off.gso_tcp, "{:?}", g.off);
            let gso = g.off.gso.expect("vnet header gives GSO");
            assert_eq!(gso.kind, GsoKind::Tcp4);
            assert!(gso.size > 0 && gso.size as usize <= 1460, "{gso:?}");
            assert_eq!(g.off.vnet.unwrap().csum(), Some((34, 16)));
            let segs = offload::segment_tcp(&g.bytes, &m, gso.size).unwrap();
            assert_eq!(segs.len(), pn.div_ceil(gso.size as usize));
            segs
        } else {
            assert!(g.off.gso.is_none() || pn == 0, "{:?}", g.off);
            let mut f = g.bytes.clone();
            offload::complete_checksum(&mut f, &m).unwrap();
            vec![f]
        };
        for s in segs {
            let sm = PacketMeta::parse(&s, LinkType::Ethernet);
            assert!(s.len() <= 1514, "segment of {} bytes", s.len());
            assert!(sm.ipv4_checksum_ok(&s));
            assert_eq!(offload::classify_checksum(&s, &sm), Ok(CsumState::Valid));
            let (ps, pn) = sm.payload(&s).unwrap();
            let rel = tcp_seq(&s, &sm).wrapping_sub(isn.wrapping_add(1)) as usize;
            for (k, b) in s[ps..ps + pn].iter().enumerate() {
                assert!(rel + k < STREAM, "payload past the stream");
                assert_eq!(*b, pattern(rel + k), "stream byte {}", rel + k);
                covered[rel + k] = true;
            }
        }
    }
    assert!(supers > 0, "super-frames seen (TSO/GSO on the sender)");
    assert!(
        covered.iter().all(|c| *c),
        "the whole stream is in the frames"
    );
    println!("{supers} TCP super-frames cut and checked");

    // (4) The ring without the header: the same super-frames, whole, flagged by status.
    let plain_supers: Vec<&Got> = gp
        .iter()
        .filter(|g| from_a(g).is_some_and(|m| m.dport == TCP_PORT && g.bytes.len() > 1514))
        .collect();
    assert!(!plain_supers.is_empty());
    for g in &plain_supers {
        assert!(
            g.off.csum_partial && g.off.gso_tcp && g.off.vnet.is_none(),
            "{:?}",
            g.off
        );
        if drops == 0 {
            assert!(
                gv.iter().any(|v| v.bytes == g.bytes),
                "the same frame on both rings"
            );
        }
    }

    // (4b) Small blocks: a frame longer than a block's room is cut to exactly
    // `largest_frame`, and reported cut; the rest are whole.
    let cut: Vec<&Got> = gs.iter().filter(|g| g.truncated).collect();
    assert!(!cut.is_empty(), "super-frames longer than 16 KiB were cut");
    for g in &gs {
        if g.truncated {
            assert_eq!(
                g.bytes.len(),
                SMALL.largest_frame(),
                "cut at the block's room"
            );
        } else {
            assert!(g.bytes.len() <= SMALL.largest_frame());
        }
    }
    assert!(
        gv.iter()
            .chain(&gp)
            .any(|g| g.bytes.len() > SMALL.largest_frame()),
        "and the 1 MiB blocks took those frames whole"
    );

    // (5) UDP: plain datagrams partial; the UDP_SEGMENT one as the kernel has it.
    let udp: Vec<&Got> = gv
        .iter()
        .filter(|g| from_a(g).is_some_and(|m| m.l4proto == 17 && m.dport == UDP_PORT))
        .collect();
    assert_eq!(udp.len(), 3, "three datagrams");
    for g in &udp {
        assert!(g.off.csum_partial && g.off.gso.is_none(), "{:?}", g.off);
        assert_eq!(g.off.vnet.unwrap().csum(), Some((34, 6)));
    }
    if udp_gso_sent {
        let u: Vec<&Got> = gv
            .iter()
            .filter(|g| from_a(g).is_some_and(|m| m.l4proto == 17 && m.dport == UDP_PORT + 1))
            .collect();
        assert!(!u.is_empty(), "the UDP_SEGMENT send was seen");
        for g in &u {
            assert!(g.off.csum_partial, "{:?}", g.off);
            if let Some(gso) = g.off.gso {
                assert_eq!(gso.kind, GsoKind::Udp);
                assert_eq!(gso.size, 1000);
            }
        }
        println!("UDP_SEGMENT: {} frame(s), gso {:?}", u.len(), u[0].off.gso);
    }

    // (6) weir's own super-frames sent with a virtio-net header.
    if tx_part {
        let by_port = |sport: u16| -> Vec<&Got> {
            gv.iter()
                .filter(|g| from_a(g).is_some_and(|m| m.l4proto == 6 && m.sport == sport))
                .collect()
        };
        let (_, f1) = &sent_supers[0];
        let r1 = by_port(40001);
        assert_eq!(r1.len(), 1, "TSO on: passed through as one super-frame");
        assert_eq!(&r1[0].bytes, f1);
        assert_eq!(
            r1[0].off.gso.map(|g| (g.kind, g.size)),
            Some((GsoKind::Tcp4, 1448))
        );
        let (_, f2) = &sent_supers[1];
        let r2 = by_port(40002);
        let m2 = PacketMeta::parse(f2, LinkType::Ethernet);
        let ours = offload::segment_tcp(f2, &m2, 1448).unwrap();
        assert_eq!(r2.len(), ours.len(), "TSO off: the kernel cut it");
        for (k, (theirs, mine)) in r2.iter().zip(&ours).enumerate() {
            let mut t = theirs.bytes.clone();
            let m = PacketMeta::parse(&t, LinkType::Ethernet);
            if theirs.off.csum_partial {
                offload::complete_checksum(&mut t, &m).unwrap();
            }
            assert_eq!(&t, mine, "segment {k}: the kernel's GSO = segment_tcp");
        }
        let r3 = by_port(40003);
        assert_eq!(r3.len(), 1, "a plain frame on the vnet socket went out");
        let m3 = PacketMeta::parse(&r3[0].bytes, LinkType::Ethernet);
        assert_eq!(
            offload::classify_checksum(&r3[0].bytes, &m3),
            Ok(CsumState::Valid)
        );
        println!(
            "sent with a vnet header: passed through whole (TSO on), cut into {} frames \
             equal to segment_tcp's (TSO off)",
            ours.len()
        );
    }
}

/// The initial sequence number of A's connection to `port` (from its SYN).
fn syns_of(frames: &[Got], port: u16) -> Option<u32> {
    frames.iter().find_map(|g| {
        let m = from_a(g)?;
        (m.l4proto == 6 && m.dport == port && m.tcp_flags & tf::SYN != 0)
            .then(|| tcp_seq(&g.bytes, &m))
    })
}
