//! AF_PACKET: weir reads and writes whole Ethernet frames on an interface (inline mode, where
//! weir forwards between interfaces itself). One socket per interface, bound to it for every
//! protocol; frames weir sends are not read back (`PACKET_IGNORE_OUTGOING`). Batched both
//! ways: `recvmmsg` takes up to a batch of frames, `sendmmsg` sends what a batch forwards out
//! of this interface in one call.
//!
//! This is the portable fallback: [`crate::xdp`] is the faster path where the kernel has it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The largest frame taken (an MTU of 9000 with room to spare; larger ones are cut and
/// counted as truncated).
const RX_BUF: usize = 9216 + 64;

/// Counters of one interface.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub received: u64,
    pub sent: u64,
    pub batches: u64,
    /// Frames longer than the receive buffer (cut; weir drops them).
    pub truncated: u64,
    /// Frames the kernel did not take on send (`sendmmsg` short or failed).
    pub send_errors: u64,
    /// Frames the kernel dropped for want of room in the receive ring.
    pub ring_drops: u64,
}

/// Ring geometry: blocks of `BLOCK` bytes, `BLOCKS` of them; a frame (with its header) may
/// take up to `FRAME_MAX` bytes (a 9000-byte MTU fits).
const BLOCK: usize = 1 << 20;
const BLOCKS: usize = 32;
const FRAME_MAX: usize = 16384;
/// A block not yet full goes to weir this long after its first frame.
const RETIRE_MS: u32 = 1;
const TP_STATUS_USER: u32 = 1;

/// A TPACKET_V3 receive ring: `BLOCKS` blocks, each owned by the kernel (filling it) or by
/// weir (status `TP_STATUS_USER`) until weir writes the status back.
struct RxRing {
    map: *mut u8,
    /// The next block to read.
    next: usize,
    /// The block of the current batch, handed back by `release`.
    held: Option<usize>,
    /// Frames of the current batch: (offset in the map, captured length, wire length).
    frames: Vec<(usize, usize, usize)>,
}

// SAFETY: the mapping is owned by the ring and used by one thread at a time (the Port moves
// between threads as a whole).
unsafe impl Send for RxRing {}

impl RxRing {
    fn new(fd: i32, name: &str) -> io::Result<RxRing> {
        let v3: i32 = 2; // TPACKET_V3
                         // SAFETY: setsockopt with a live i32 and its size.
        if unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_VERSION,
                &v3 as *const i32 as *const libc::c_void,
                4,
            )
        } < 0
        {
            return Err(os_err(&format!("{name}: TPACKET_V3")));
        }
        // tpacket_req3: block size, block count, frame size, frame count, retire timeout,
        // private area size, feature word
        let req: [u32; 7] = [
            BLOCK as u32,
            BLOCKS as u32,
            FRAME_MAX as u32,
            (BLOCK / FRAME_MAX * BLOCKS) as u32,
            RETIRE_MS,
            0,
            0,
        ];
        // SAFETY: setsockopt with a live tpacket_req3 (seven u32) and its size.
        if unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_RX_RING,
                req.as_ptr() as *const libc::c_void,
                28,
            )
        } < 0
        {
            return Err(os_err(&format!("{name}: receive ring")));
        }
        // SAFETY: maps the ring the kernel just set up on this socket; checked below,
        // unmapped in Drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BLOCK * BLOCKS,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd,
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED may exceed the memlock limit: map without it
            // SAFETY: as above.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    BLOCK * BLOCKS,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(os_err(&format!("{name}: mapping the receive ring")));
            }
            m
        } else {
            map
        };
        Ok(RxRing {
            map: map as *mut u8,
            next: 0,
            held: None,
            frames: Vec::new(),
        })
    }

    /// The status word of block `b`.
    fn status(&self, b: usize) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: block `b` < BLOCKS lies in the mapping; its status is an aligned u32 at
        // offset 8 of the block descriptor, which the kernel and weir hand over atomically.
        unsafe { &*(self.map.add(b * BLOCK + 8) as *const std::sync::atomic::AtomicU32) }
    }

    fn u32_at(&self, off: usize) -> u32 {
        // SAFETY: `off` + 4 lies inside the mapping (callers check against the block bounds).
        unsafe { (self.map.add(off) as *const u32).read_unaligned() }
    }

    /// Take the next block if the kernel handed it over: its frames become the batch.
    fn take(&mut self) -> usize {
        self.frames.clear();
        let b = self.next;
        if self.status(b).load(std::sync::atomic::Ordering::Acquire) & TP_STATUS_USER == 0 {
            return 0;
        }
        let base = b * BLOCK;
        let num = self.u32_at(base + 12) as usize;
        let mut off = self.u32_at(base + 16) as usize;
        for _ in 0..num {
            if off < 32 || off + 28 > BLOCK {
                break;
            }
            let h = base + off;
            let (snap, len) = (self.u32_at(h + 12) as usize, self.u32_at(h + 16) as usize);
            // SAFETY: reading a u16 inside the frame header (checked in bounds above).
            let mac = unsafe { (self.map.add(h + 24) as *const u16).read_unaligned() } as usize;
            if off + mac + snap > BLOCK {
                break;
            }
            self.frames.push((h + mac, snap, len));
            let next = self.u32_at(h) as usize;
            if next == 0 {
                break;
            }
            off += next;
        }
        self.held = Some(b);
        self.next = (b + 1) % BLOCKS;
        self.frames.len()
    }

    fn truncated_in_batch(&self) -> usize {
        self.frames.iter().filter(|f| f.1 < f.2).count()
    }

    fn frame_mut(&mut self, i: usize) -> (&mut [u8], bool) {
        let (off, snap, len) = self.frames[i];
        // SAFETY: the frame lies inside the held block (checked in `take`), which the kernel
        // does not touch until `release`; one frame is borrowed at a time.
        (
            unsafe { std::slice::from_raw_parts_mut(self.map.add(off), snap) },
            snap < len,
        )
    }

    fn frame(&self, i: usize) -> &[u8] {
        let (off, snap, _) = self.frames[i];
        // SAFETY: as in `frame_mut`.
        unsafe { std::slice::from_raw_parts(self.map.add(off), snap) }
    }

    /// Hand the held block back to the kernel.
    fn release(&mut self) {
        if let Some(b) = self.held.take() {
            self.frames.clear();
            self.status(b)
                .store(0, std::sync::atomic::Ordering::Release);
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.map as *mut libc::c_void, BLOCK * BLOCKS) };
    }
}

/// An AF_PACKET socket on one interface.
pub struct Port {
    fd: OwnedFd,
    pub ifindex: u32,
    pub name: String,
    pub mac: [u8; 6],
    bufs: Vec<Vec<u8>>,
    got: Vec<crate::mmsg::Got>,
    /// With a TPACKET_V3 receive ring ([`Port::open_ring`]): frames are read in place there.
    ring: Option<RxRing>,
    n: usize,
    /// Frames queued by [`Port::push`], sent by [`Port::flush`]; buffers reused.
    out: Vec<Vec<u8>>,
    out_n: usize,
    pub stats: Stats,
}

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// An interface request naming `name` (checked: 1 to 15 bytes), the rest zero.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IF_NAMESIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name '{name}': 1 to 15 bytes"),
        ));
    }
    // SAFETY: ifreq is plain old data; zeroed is valid, the name is copied in with its NUL.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// The interface's index and MAC address (`SIOCGIFINDEX`, `SIOCGIFHWADDR`).
pub(crate) fn iface(fd: i32, name: &str) -> io::Result<(u32, [u8; 6])> {
    let mut req = ifreq(name)?;
    // SAFETY: ioctl with a live ifreq, as SIOCGIFINDEX expects.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFINDEX, &mut req) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("interface {name}: {e} (does it exist in this network namespace?)"),
        ));
    }
    // SAFETY: the kernel filled the index member of the union.
    let idx = unsafe { req.ifr_ifru.ifru_ifindex } as u32;
    // SAFETY: as above for SIOCGIFHWADDR.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut req) } < 0 {
        return Err(os_err(&format!("interface {name}: hardware address")));
    }
    // SAFETY: the kernel filled the hwaddr member of the union.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok((idx, mac))
}

/// The MTU of interface `name` (`SIOCGIFMTU`): the largest IP packet its link carries.
pub fn mtu(name: &str) -> io::Result<usize> {
    let mut req = ifreq(name)?;
    // SAFETY: plain socket(2) call; the descriptor is checked and owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os_err("socket for SIOCGIFMTU"));
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ioctl with a live ifreq, as SIOCGIFMTU expects.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } < 0 {
        return Err(os_err(&format!("interface {name}: MTU")));
    }
    // SAFETY: the kernel filled the mtu member of the union.
    let m = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(m.max(0) as usize)
}

/// An AF_PACKET socket bound to interface `name`: `proto` (network order) is what it takes
/// (0: nothing) and what it is bound with. Errors name the cause.
fn bound_socket(name: &str, proto: u16) -> io::Result<(OwnedFd, u32, [u8; 6])> {
    // SAFETY: plain socket(2) call; the descriptor is checked and owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            proto as i32,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("AF_PACKET socket: {e} (weir needs CAP_NET_RAW)"),
        ));
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (ifindex, mac) = iface(fd.as_raw_fd(), name)?;
    // SAFETY: sockaddr_ll is plain old data; zeroed, then filled.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = proto;
    sa.sll_ifindex = ifindex as i32;
    // SAFETY: a valid sockaddr_ll and its size.
    if unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    } < 0
    {
        return Err(os_err(&format!("binding to {name}")));
    }
    Ok((fd, ifindex, mac))
}

impl Port {
    /// Open a socket on interface `name` taking every protocol, in batches of `batch`.
    /// Errors name the cause: a missing interface, no CAP_NET_RAW.
    pub fn open(name: &str, batch: usize) -> io::Result<Port> {
        Port::open_proto(name, libc::ETH_P_ALL as u16, batch)
    }

    /// As [`Port::open`], for one protocol (an EtherType, such as `ETH_P_ARP`) only.
    pub fn open_proto(name: &str, proto: u16, batch: usize) -> io::Result<Port> {
        let proto = proto.to_be();
        let (fd, ifindex, mac) = bound_socket(name, proto)?;
        let one: i32 = 1;
        let rcvbuf: i32 = 8 << 20;
        // SAFETY: setsockopt with live i32 values and their sizes; a failure of the buffer
        // size is not fatal (the default stays).
        unsafe {
            if libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                &one as *const i32 as *const libc::c_void,
                4,
            ) < 0
            {
                return Err(os_err("PACKET_IGNORE_OUTGOING (Linux 4.20 or later)"));
            }
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &rcvbuf as *const i32 as *const libc::c_void,
                4,
            );
        }
        let batch = batch.clamp(1, 1024);
        Ok(Port {
            fd,
            ifindex,
            name: name.to_string(),
            mac,
            bufs: (0..batch).map(|_| vec![0u8; RX_BUF]).collect(),
            got: vec![Default::default(); batch],
            ring: None,
            n: 0,
            out: Vec::new(),
            out_n: 0,
            stats: Stats::default(),
        })
    }

    /// A send-only socket on interface `name` (it takes no frames), skipping the queueing
    /// discipline (`PACKET_QDISC_BYPASS`): a traffic generator's.
    pub fn open_tx(name: &str) -> io::Result<Port> {
        // protocol 0: no frame is delivered to it
        let (fd, ifindex, mac) = bound_socket(name, 0)?;
        let one: i32 = 1;
        let sndbuf: i32 = 64 << 20;
        // SAFETY: setsockopt with live i32 values and their sizes; failures are not fatal
        // (the qdisc is then used, the default buffer kept).
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_QDISC_BYPASS,
                &one as *const i32 as *const libc::c_void,
                4,
            );
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUFFORCE,
                &sndbuf as *const i32 as *const libc::c_void,
                4,
            );
        }
        Ok(Port {
            fd,
            ifindex,
            name: name.to_string(),
            mac,
            bufs: Vec::new(),
            got: Vec::new(),
            ring: None,
            n: 0,
            out: Vec::new(),
            out_n: 0,
            stats: Stats::default(),
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Join a fanout group of this interface's sockets, steered by the classic BPF program
    /// `prog` (`PACKET_FANOUT_CBPF`: a frame goes to socket `prog(frame) % members`, members
    /// numbered in the order they joined). `group`: the id returned when the first socket
    /// joined (`None`: this socket starts a new group, whose id the kernel picks). Returns the
    /// group's id.
    pub fn join_fanout(&self, group: Option<u16>, prog: &[crate::steer::Insn]) -> io::Result<u16> {
        const FANOUT_CBPF: u32 = 6;
        const FLAG_UNIQUEID: u32 = 0x2000;
        let arg: u32 = match group {
            Some(id) => id as u32 | FANOUT_CBPF << 16,
            None => (FANOUT_CBPF | FLAG_UNIQUEID) << 16,
        };
        let fd = self.fd.as_raw_fd();
        // SAFETY: setsockopt with a live u32 and its size.
        if unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &arg as *const u32 as *const libc::c_void,
                4,
            )
        } < 0
        {
            return Err(os_err(&format!(
                "{}: joining a fanout group (PACKET_FANOUT_CBPF, Linux 4.3 or later)",
                self.name
            )));
        }
        let id = match group {
            Some(id) => id,
            None => {
                let mut v: u32 = 0;
                let mut len = 4u32;
                // SAFETY: getsockopt into a live u32 with its size.
                if unsafe {
                    libc::getsockopt(
                        fd,
                        libc::SOL_PACKET,
                        libc::PACKET_FANOUT,
                        &mut v as *mut u32 as *mut libc::c_void,
                        &mut len,
                    )
                } < 0
                {
                    return Err(os_err(&format!(
                        "{}: reading the fanout group id",
                        self.name
                    )));
                }
                let prog = libc::sock_fprog {
                    len: prog.len() as u16,
                    filter: prog.as_ptr() as *mut libc::sock_filter,
                };
                // SAFETY: setsockopt with a live sock_fprog pointing at `prog`, which outlives
                // the call (the kernel copies the program).
                if unsafe {
                    libc::setsockopt(
                        fd,
                        libc::SOL_PACKET,
                        libc::PACKET_FANOUT_DATA,
                        &prog as *const libc::sock_fprog as *const libc::c_void,
                        std::mem::size_of::<libc::sock_fprog>() as u32,
                    )
                } < 0
                {
                    return Err(os_err(&format!(
                        "{}: the fanout steering program",
                        self.name
                    )));
                }
                v as u16
            }
        };
        Ok(id)
    }

    /// As [`Port::open`], reading through a TPACKET_V3 ring mapped from the kernel: the
    /// kernel copies frames into blocks of the ring as they arrive (in its receive path, not
    /// in a system call of weir's), weir takes a whole block at a time and hands it back when
    /// done. A block is handed to weir when full or `RETIRE_MS` after its first frame.
    pub fn open_ring(name: &str) -> io::Result<Port> {
        let mut p = Port::open(name, 1)?;
        p.bufs = Vec::new();
        p.got = Vec::new();
        p.ring = Some(RxRing::new(p.fd.as_raw_fd(), name)?);
        Ok(p)
    }

    /// Take the frames that are ready (never blocks). Returns how many. With a ring, the
    /// frames stay in it until [`Port::recv_done`].
    pub fn recv_batch(&mut self) -> io::Result<usize> {
        if let Some(r) = &mut self.ring {
            r.release();
            let n = r.take();
            self.n = n;
            if n > 0 {
                self.stats.received += n as u64;
                self.stats.batches += 1;
                self.stats.truncated += r.truncated_in_batch() as u64;
            }
            return Ok(n);
        }
        self.n = 0;
        let n = match crate::mmsg::recv(
            self.fd.as_raw_fd(),
            &mut self.bufs,
            &mut self.got,
            libc::MSG_DONTWAIT,
        ) {
            Ok(n) => n,
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                    _ => Err(io::Error::new(
                        e.kind(),
                        format!("receiving on {}: {e}", self.name),
                    )),
                }
            }
        };
        self.stats.truncated += self.got[..n].iter().filter(|g| g.truncated).count() as u64;
        self.n = n;
        self.stats.received += n as u64;
        self.stats.batches += 1;
        Ok(n)
    }

    /// Frame `i` of the last batch (writable: weir rewrites it in place), and whether it was
    /// cut short.
    pub fn frame_mut(&mut self, i: usize) -> (&mut [u8], bool) {
        if let Some(r) = &mut self.ring {
            return r.frame_mut(i);
        }
        let g = self.got[i];
        (&mut self.bufs[i][..g.len.min(RX_BUF)], g.truncated)
    }

    pub fn batch_len(&self) -> usize {
        self.n
    }

    /// Frame `i` of the last batch, read-only.
    pub fn frame(&self, i: usize) -> &[u8] {
        if let Some(r) = &self.ring {
            return r.frame(i);
        }
        &self.bufs[i][..self.got[i].len.min(RX_BUF)]
    }

    /// With a ring: hand the last batch's block back to the kernel.
    pub fn recv_done(&mut self) {
        if let Some(r) = &mut self.ring {
            r.release();
        }
    }

    /// With a ring: frames the kernel dropped because the ring was full (since the last call;
    /// `PACKET_STATISTICS` resets when read).
    pub fn ring_drops(&mut self) -> u64 {
        if self.ring.is_none() {
            return 0;
        }
        // SAFETY: tpacket_stats_v3 is three u32; the kernel fills it.
        let mut st = [0u32; 3];
        let mut len = 12u32;
        // SAFETY: getsockopt into a live buffer of the given size.
        if unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                st.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        } == 0
        {
            self.stats.ring_drops += st[1] as u64;
        }
        self.stats.ring_drops
    }

    /// Queue a frame (copied) for the next [`Port::flush`].
    pub fn push(&mut self, frame: &[u8]) {
        if self.out_n == self.out.len() {
            self.out.push(Vec::new());
        }
        let b = &mut self.out[self.out_n];
        b.clear();
        b.extend_from_slice(frame);
        self.out_n += 1;
    }

    /// Send the queued frames in one `sendmmsg`.
    pub fn flush(&mut self) -> io::Result<()> {
        let out = std::mem::take(&mut self.out);
        let refs: Vec<&[u8]> = out[..self.out_n].iter().map(|f| f.as_slice()).collect();
        let r = self.send_batch(&refs);
        drop(refs);
        self.out = out;
        self.out_n = 0;
        r
    }

    /// Send frames out of this interface in one `sendmmsg`.
    pub fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let mut iov: Vec<libc::iovec> = frames
            .iter()
            .map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain old data; zeroed, then each points at its own iovec.
        let mut msgs: Vec<libc::mmsghdr> = (0..frames.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        let mut done = 0usize;
        while done < msgs.len() {
            // SAFETY: the headers point at frames the caller keeps alive for the call; the
            // socket is bound to the interface, so no address is needed.
            let n = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (msgs.len() - done) as u32,
                    0,
                )
            };
            if n <= 0 {
                // the frame that failed is counted and skipped; the rest are tried again
                self.stats.send_errors += 1;
                done += 1;
                continue;
            }
            done += n as usize;
            self.stats.sent += n as u64;
        }
        Ok(())
    }
}
