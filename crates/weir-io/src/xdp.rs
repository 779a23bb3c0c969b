//! AF_XDP: an XDP program on the interface sends the frames weir handles (IPv4, and IPv6 but
//! for neighbour discovery) into an AF_XDP socket before the kernel builds a socket buffer for
//! them; everything else (ARP, neighbour discovery, other protocols) passes to the kernel.
//! Frames are read from and written to a shared memory area (the UMEM) through four rings:
//! fill (free frames for the kernel to receive into), RX, TX and completion.
//!
//! The XDP program is 25 BPF instructions written here as raw instructions and loaded with
//! `bpf(2)`: no compiler for BPF and no BPF library are needed. It is attached through a BPF
//! link, so it is detached when weir's process ends, however it ends.
//!
//! On a virtual interface (veth) the kernel allows only copy mode (frames are copied into and
//! out of the UMEM); native drivers with zero-copy support are used in copy mode too for now.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// The size of one UMEM frame.
const FRAME: u64 = 2048;
/// Frames for receiving (given to the kernel through the fill ring) and for sending.
const RX_FRAMES: u64 = 2048;
const TX_FRAMES: u64 = 2048;
/// Entries of each ring (a power of two).
const RING: u32 = 2048;

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

// ---------------------------------------------------------------------------- bpf(2)

const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_UPDATE_ELEM: i64 = 2;
const BPF_PROG_LOAD: i64 = 5;
const BPF_LINK_CREATE: i64 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PASS: i32 = 2;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// A `union bpf_attr`, written field by field at the kernel's offsets (the rest stays zero,
/// as the kernel requires).
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(mut self, off: usize, v: u32) -> Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, off: usize, v: u64) -> Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn bytes(mut self, off: usize, v: &[u8]) -> Attr {
        self.0[off..off + v.len()].copy_from_slice(v);
        self
    }
}

fn bpf(cmd: i64, attr: &mut Attr) -> io::Result<i32> {
    // SAFETY: bpf(2) reads (and for some commands writes) at most the given size of the
    // attribute block, which lives for the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as i32)
}

/// One BPF instruction: opcode, destination and source registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0xf);
    b[2..4].copy_from_slice(&off.to_ne_bytes());
    b[4..8].copy_from_slice(&imm.to_ne_bytes());
    b
}

/// The XDP program: IPv4 and IPv6 frames (but neighbour discovery, ICMPv6 types 133-137) to
/// the AF_XDP socket of their receive queue, when there is one; everything else to the kernel.
fn program(map_fd: i32) -> Vec<u8> {
    const LDXW: u8 = 0x61;
    const LDXH: u8 = 0x69;
    const LDXB: u8 = 0x71;
    const MOV64X: u8 = 0xbf;
    const MOV64K: u8 = 0xb7;
    const ADD64K: u8 = 0x07;
    const JGTX: u8 = 0x2d;
    const JEQK: u8 = 0x15;
    const JNEK: u8 = 0x55;
    const JGTK: u8 = 0x25;
    const JGEK: u8 = 0x35;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const LDDW: u8 = 0x18;
    const PSEUDO_MAP_FD: u8 = 1;
    // pc:  REDIRECT = 17, PASS = 23 (offsets count from the next instruction)
    let p = [
        insn(MOV64X, 6, 1, 0, 0),                   // 0: r6 = ctx
        insn(LDXW, 2, 1, 0, 0),                     // 1: r2 = data
        insn(LDXW, 3, 1, 4, 0),                     // 2: r3 = data_end
        insn(MOV64X, 4, 2, 0, 0),                   // 3: r4 = data
        insn(ADD64K, 4, 0, 0, 14),                  // 4: r4 += 14 (Ethernet header)
        insn(JGTX, 4, 3, 17, 0),                    // 5: short frame -> PASS
        insn(LDXH, 5, 2, 12, 0),                    // 6: r5 = ethertype (network order)
        insn(JEQK, 5, 0, 9, 0x0008),                // 7: IPv4 -> REDIRECT
        insn(JNEK, 5, 0, 14, 0xdd86),               // 8: not IPv6 -> PASS
        insn(MOV64X, 4, 2, 0, 0),                   // 9: r4 = data
        insn(ADD64K, 4, 0, 0, 55),                  // 10: r4 += 14 + 40 + 1
        insn(JGTX, 4, 3, 5, 0),                     // 11: no room for an ICMPv6 type -> REDIRECT
        insn(LDXB, 5, 2, 20, 0),                    // 12: r5 = next header
        insn(JNEK, 5, 0, 3, 58),                    // 13: not ICMPv6 -> REDIRECT
        insn(LDXB, 5, 2, 54, 0),                    // 14: r5 = ICMPv6 type
        insn(JGTK, 5, 0, 1, 137),                   // 15: above 137 -> REDIRECT
        insn(JGEK, 5, 0, 6, 133), // 16: 133..137 (ND, router discovery, redirect) -> PASS
        insn(LDXW, 2, 6, 16, 0),  // 17: REDIRECT: r2 = rx_queue_index
        insn(LDDW, 1, PSEUDO_MAP_FD, 0, map_fd), // 18: r1 = the XSKMAP
        insn(0, 0, 0, 0, 0),      // 19: (second half of the 64-bit load)
        insn(MOV64K, 3, 0, 0, XDP_PASS), // 20: no socket on this queue: pass
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // 21
        insn(EXIT, 0, 0, 0, 0),   // 22
        insn(MOV64K, 0, 0, 0, XDP_PASS), // 23: PASS
        insn(EXIT, 0, 0, 0, 0),   // 24
    ];
    p.concat()
}

/// The XDP program attached to one interface, with its map of sockets by receive queue.
/// Dropping it detaches the program.
pub struct Program {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    /// `native` (in the driver) or `generic` (after the kernel built a socket buffer).
    pub mode: &'static str,
}

impl Program {
    /// Load the program and attach it to interface `ifindex` (native mode where the driver
    /// has it, generic otherwise), with room for sockets on `queues` receive queues.
    pub fn attach(ifindex: u32, name: &str, queues: u32) -> io::Result<Program> {
        let mut a = Attr::new()
            .u32(0, BPF_MAP_TYPE_XSKMAP)
            .u32(4, 4)
            .u32(8, 4)
            .u32(12, queues.max(1))
            .bytes(28, b"weir_xsks");
        let map = bpf(BPF_MAP_CREATE, &mut a).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("creating the XDP socket map: {e} (weir needs CAP_BPF or root)"),
            )
        })?;
        // SAFETY: a fresh descriptor returned by bpf(2), owned from here on.
        let map = unsafe { OwnedFd::from_raw_fd(map) };
        let code = program(map.as_raw_fd());
        let license = c"Dual MIT/GPL";
        let load = |log: &mut Vec<u8>| {
            let mut a = Attr::new()
                .u32(0, BPF_PROG_TYPE_XDP)
                .u32(4, (code.len() / 8) as u32)
                .u64(8, code.as_ptr() as u64)
                .u64(16, license.as_ptr() as u64)
                .bytes(48, b"weir_xdp")
                .u32(68, BPF_XDP);
            if !log.is_empty() {
                a = a
                    .u32(24, 1)
                    .u32(28, log.len() as u32)
                    .u64(32, log.as_mut_ptr() as u64);
            }
            bpf(BPF_PROG_LOAD, &mut a)
        };
        let prog = match load(&mut Vec::new()) {
            Ok(fd) => fd,
            Err(e) => {
                let mut log = vec![0u8; 1 << 16];
                let _ = load(&mut log);
                let end = log.iter().position(|&b| b == 0).unwrap_or(0);
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "loading the XDP program: {e}{}",
                        if end > 0 {
                            format!("\n{}", String::from_utf8_lossy(&log[..end]))
                        } else {
                            String::new()
                        }
                    ),
                ));
            }
        };
        // SAFETY: a fresh descriptor returned by bpf(2), owned from here on.
        let prog = unsafe { OwnedFd::from_raw_fd(prog) };
        let mut last = None;
        for (flags, mode) in [
            (XDP_FLAGS_DRV_MODE, "native"),
            (XDP_FLAGS_SKB_MODE, "generic"),
        ] {
            let mut a = Attr::new()
                .u32(0, prog.as_raw_fd() as u32)
                .u32(4, ifindex)
                .u32(8, BPF_XDP)
                .u32(12, flags);
            match bpf(BPF_LINK_CREATE, &mut a) {
                Ok(link) => {
                    return Ok(Program {
                        map,
                        _prog: prog,
                        // SAFETY: a fresh descriptor returned by bpf(2), owned from here on.
                        _link: unsafe { OwnedFd::from_raw_fd(link) },
                        mode,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        let e = last.unwrap_or_else(|| io::Error::other("no mode"));
        Err(io::Error::new(
            e.kind(),
            format!(
                "attaching the XDP program to {name}: {e}{}",
                if e.raw_os_error() == Some(libc::EBUSY) {
                    " (another XDP program is attached)"
                } else {
                    ""
                }
            ),
        ))
    }

    /// Send what arrives on receive queue `queue` to socket `xsk`.
    fn insert(&self, queue: u32, xsk: i32) -> io::Result<()> {
        let key = queue;
        let value = xsk as u32;
        let mut a = Attr::new()
            .u32(0, self.map.as_raw_fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, &value as *const u32 as u64);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a)
            .map(|_| ())
            .map_err(|e| io::Error::new(e.kind(), format!("adding the XDP socket to the map: {e}")))
    }
}

// ---------------------------------------------------------------------------- rings

/// One of the four rings shared with the kernel: a producer and a consumer index and an array
/// of entries, in memory mapped from the socket.
struct Ring<T> {
    map: *mut libc::c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    mask: u32,
    /// Our copy of the index we own (producer of fill/TX, consumer of RX/completion).
    local: u32,
}

impl<T: Copy> Ring<T> {
    /// Map ring `pgoff` of socket `fd`, laid out as `off` says.
    fn map(fd: i32, off: &libc::xdp_ring_offset, pgoff: u64, what: &str) -> io::Result<Ring<T>> {
        let len = off.desc as usize + RING as usize * std::mem::size_of::<T>();
        // SAFETY: mmap of the socket's ring at the offset the kernel gave; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(os_err(&format!("mapping the {what} ring")));
        }
        let at = |o: u64| (map as usize + o as usize) as *mut u8;
        // SAFETY (for the reads through these pointers later): they point into the mapping,
        // at the kernel's offsets, which stays mapped until the ring is dropped; the indexes
        // are u32 the kernel updates atomically.
        Ok(Ring {
            map,
            map_len: len,
            producer: at(off.producer) as *const AtomicU32,
            consumer: at(off.consumer) as *const AtomicU32,
            flags: at(off.flags) as *const AtomicU32,
            entries: at(off.desc) as *mut T,
            mask: RING - 1,
            local: 0,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping (see `map`).
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping (see `map`).
        unsafe { &*self.consumer }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: points into the live mapping (see `map`).
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn write(&mut self, i: u32, v: T) {
        // SAFETY: the index is masked into the ring's entry array, inside the mapping; the
        // slot belongs to the producer (us) until the producer index is published.
        unsafe { self.entries.add((i & self.mask) as usize).write(v) }
    }

    fn read(&self, i: u32) -> T {
        // SAFETY: as in `write`; the slot was published by the kernel (producer index read
        // with Acquire) and is ours until the consumer index moves past it.
        unsafe { self.entries.add((i & self.mask) as usize).read() }
    }

    /// Producer side: free slots.
    fn free(&self) -> u32 {
        RING - self
            .local
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Consumer side: entries ready.
    fn ready(&self) -> u32 {
        self.producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.local)
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once; nothing points into it afterwards.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

// ---------------------------------------------------------------------------- socket

/// Counters of one interface.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub received: u64,
    pub sent: u64,
    pub batches: u64,
    /// Frames that did not fit a UMEM frame (weir drops them).
    pub truncated: u64,
    /// Frames not sent: no free TX frame, or the kernel refused them.
    pub send_errors: u64,
    /// Kernel counters (`XDP_STATISTICS`): frames dropped for want of a free frame or room in
    /// the RX ring.
    pub kernel_dropped: u64,
    pub kernel_ring_full: u64,
    pub kernel_fill_empty: u64,
}

/// An AF_XDP socket on one receive queue of an interface, with its UMEM and the XDP program.
pub struct Port {
    fd: OwnedFd,
    pub ifindex: u32,
    pub name: String,
    pub mac: [u8; 6],
    umem: *mut u8,
    umem_len: usize,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    /// TX frames not in flight.
    tx_free: Vec<u64>,
    /// The last batch received: (address, length) of each frame.
    batch: Vec<(u64, u32)>,
    max_batch: usize,
    /// TX descriptors written but not yet published.
    tx_pending: u32,
    pub stats: Stats,
    /// Shared by the sockets of one interface (one per receive queue).
    pub program: std::sync::Arc<Program>,
}

// SAFETY: the raw pointers point into mappings the Port owns; a Port moves between threads
// as a whole (it is used by one worker at a time), which is what Send promises.
unsafe impl Send for Port {}

impl Port {
    /// Open an AF_XDP socket on interface `name` (queue 0; copy mode), attach the XDP program
    /// that feeds it, and stock the fill ring. `batch`: frames taken per receive.
    pub fn open(name: &str, batch: usize) -> io::Result<Port> {
        Port::open_queue(name, batch, 0, 1, None)
    }

    /// [`Port::open`] on receive queue `queue` of an interface with `queues` of them: the
    /// first socket of the interface attaches the program (`program` None), the others join
    /// it (its map sends each queue's frames to that queue's socket).
    pub fn open_queue(
        name: &str,
        batch: usize,
        queue: u32,
        queues: u32,
        program: Option<std::sync::Arc<Program>>,
    ) -> io::Result<Port> {
        // SAFETY: plain socket(2) call; the descriptor is checked and owned below.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("AF_XDP socket: {e} (needs Linux 4.18+ with CONFIG_XDP_SOCKETS and CAP_NET_RAW)"),
            ));
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // interface ioctls are not served by AF_XDP sockets: ask through a UDP socket
        // SAFETY: plain socket(2) call; the descriptor is checked and owned below.
        let udp = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if udp < 0 {
            return Err(os_err("socket for interface queries"));
        }
        // SAFETY: `udp` is a fresh descriptor nothing else owns.
        let udp = unsafe { OwnedFd::from_raw_fd(udp) };
        let (ifindex, mac) = crate::afpacket::iface(udp.as_raw_fd(), name)?;
        drop(udp);
        let umem_len = ((RX_FRAMES + TX_FRAMES) * FRAME) as usize;
        // SAFETY: an anonymous private mapping, checked below, unmapped in Drop.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(os_err("allocating the UMEM"));
        }
        let umem = umem as *mut u8;
        // From here a failure must unmap the UMEM: a guard until the Port owns it.
        struct Unmap(*mut u8, usize);
        impl Drop for Unmap {
            fn drop(&mut self) {
                if !self.0.is_null() {
                    // SAFETY: our own mapping, unmapped once.
                    unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
                }
            }
        }
        let mut guard = Unmap(umem, umem_len);
        let raw = fd.as_raw_fd();
        let setopt = |opt: i32, v: *const libc::c_void, len: usize, what: &str| {
            // SAFETY: setsockopt with a pointer to a live value of the given size.
            if unsafe { libc::setsockopt(raw, libc::SOL_XDP, opt, v, len as u32) } < 0 {
                return Err(os_err(what));
            }
            Ok(())
        };
        let reg = libc::xdp_umem_reg {
            addr: umem as u64,
            len: umem_len as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setopt(
            libc::XDP_UMEM_REG,
            &reg as *const _ as *const libc::c_void,
            std::mem::size_of_val(&reg),
            "registering the UMEM",
        )?;
        for (opt, what) in [
            (libc::XDP_UMEM_FILL_RING, "fill ring"),
            (libc::XDP_UMEM_COMPLETION_RING, "completion ring"),
            (libc::XDP_RX_RING, "RX ring"),
            (libc::XDP_TX_RING, "TX ring"),
        ] {
            setopt(opt, &RING as *const u32 as *const libc::c_void, 4, what)?;
        }
        // SAFETY: xdp_mmap_offsets is plain old data; the kernel fills it.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of_val(&off) as u32;
        // SAFETY: getsockopt into a live struct of the given size.
        if unsafe {
            libc::getsockopt(
                raw,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                &mut off as *mut _ as *mut libc::c_void,
                &mut len,
            )
        } < 0
        {
            return Err(os_err("reading the ring offsets"));
        }
        let mut fill = Ring::<u64>::map(raw, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING, "fill")?;
        let comp = Ring::<u64>::map(
            raw,
            &off.cr,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            "completion",
        )?;
        let rx = Ring::map(raw, &off.rx, libc::XDP_PGOFF_RX_RING as u64, "RX")?;
        let tx = Ring::map(raw, &off.tx, libc::XDP_PGOFF_TX_RING as u64, "TX")?;
        // every receive frame to the kernel before binding
        for i in 0..RX_FRAMES.min(RING as u64) as u32 {
            fill.write(fill.local.wrapping_add(i), i as u64 * FRAME);
        }
        fill.local = fill.local.wrapping_add(RX_FRAMES.min(RING as u64) as u32);
        fill.producer().store(fill.local, Ordering::Release);
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // A socket closed a moment ago (weir restarted) leaves the queue busy until the
        // kernel has finished tearing it down (deferred work): wait up to 2 s for it.
        let mut tries = 0;
        loop {
            // SAFETY: bind with a live sockaddr_xdp and its size.
            if unsafe {
                libc::bind(
                    raw,
                    &sa as *const _ as *const libc::sockaddr,
                    std::mem::size_of_val(&sa) as u32,
                )
            } == 0
            {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) || tries == 40 {
                return Err(io::Error::new(
                    e.kind(),
                    format!("binding the AF_XDP socket to {name}: {e}"),
                ));
            }
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let program = match program {
            Some(p) => p,
            None => std::sync::Arc::new(Program::attach(ifindex, name, queues)?),
        };
        program.insert(queue, raw)?;
        guard.0 = std::ptr::null_mut();
        Ok(Port {
            fd,
            ifindex,
            name: name.to_string(),
            mac,
            umem,
            umem_len,
            fill,
            comp,
            rx,
            tx,
            tx_free: (RX_FRAMES..RX_FRAMES + TX_FRAMES)
                .map(|i| i * FRAME)
                .collect(),
            batch: Vec::with_capacity(batch),
            max_batch: batch.clamp(1, RING as usize),
            tx_pending: 0,
            stats: Stats::default(),
            program,
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Take the frames that are ready (never blocks). Returns how many. The frames stay the
    /// kernel's to reuse only after [`Port::recv_done`].
    pub fn recv_batch(&mut self) -> io::Result<usize> {
        self.batch.clear();
        let n = self.rx.ready().min(self.max_batch as u32);
        for i in 0..n {
            let d = self.rx.read(self.rx.local.wrapping_add(i));
            self.batch.push((d.addr, d.len));
        }
        if n > 0 {
            self.stats.received += n as u64;
            self.stats.batches += 1;
        }
        Ok(n as usize)
    }

    pub fn batch_len(&self) -> usize {
        self.batch.len()
    }

    /// Frame `i` of the last batch, writable in place; and whether it was cut short (never:
    /// a frame larger than a UMEM frame is not received).
    pub fn frame_mut(&mut self, i: usize) -> (&mut [u8], bool) {
        let (addr, len) = self.batch[i];
        let len = (len as u64).min(FRAME - (addr % FRAME)) as usize;
        // SAFETY: the descriptor came from the kernel for a frame of our UMEM (address below
        // the UMEM's length, checked by the kernel at bind time for every frame we gave it);
        // the length is capped to the frame; the frame is ours until `recv_done`.
        unsafe {
            (
                std::slice::from_raw_parts_mut(self.umem.add(addr as usize), len),
                false,
            )
        }
    }

    /// Frame `i` of the last batch, read-only.
    pub fn frame(&self, i: usize) -> &[u8] {
        let (addr, len) = self.batch[i];
        let len = (len as u64).min(FRAME - (addr % FRAME)) as usize;
        // SAFETY: as in `frame_mut`.
        unsafe { std::slice::from_raw_parts(self.umem.add(addr as usize), len) }
    }

    /// Give the last batch's frames back to the kernel (fill ring) and release their RX slots.
    pub fn recv_done(&mut self) {
        let n = self.batch.len() as u32;
        if n == 0 {
            return;
        }
        // the fill ring has room: it holds at most RX_FRAMES entries and these frames were
        // out of it
        for (i, &(addr, _)) in self.batch.iter().enumerate() {
            let base = addr - addr % FRAME;
            self.fill
                .write(self.fill.local.wrapping_add(i as u32), base);
        }
        self.fill.local = self.fill.local.wrapping_add(n);
        self.fill
            .producer()
            .store(self.fill.local, Ordering::Release);
        self.rx.local = self.rx.local.wrapping_add(n);
        self.rx.consumer().store(self.rx.local, Ordering::Release);
        self.batch.clear();
    }

    /// Frames the kernel has sent: their TX frames are free again.
    fn reclaim(&mut self) {
        let n = self.comp.ready();
        for i in 0..n {
            let addr = self.comp.read(self.comp.local.wrapping_add(i));
            self.tx_free.push(addr);
        }
        if n > 0 {
            self.comp.local = self.comp.local.wrapping_add(n);
            self.comp
                .consumer()
                .store(self.comp.local, Ordering::Release);
        }
    }

    /// Queue one frame for sending (copied into a TX frame); sent by [`Port::flush`].
    pub fn push(&mut self, frame: &[u8]) {
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        if frame.len() > FRAME as usize || self.tx.free() <= self.tx_pending {
            self.stats.send_errors += 1;
            return;
        }
        let Some(addr) = self.tx_free.pop() else {
            self.stats.send_errors += 1;
            return;
        };
        // SAFETY: `addr` is one of our TX frames (not in flight: it is on the free list), of
        // FRAME bytes inside the UMEM; the frame fits (checked above).
        unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), self.umem.add(addr as usize), frame.len())
        };
        let i = self.tx.local.wrapping_add(self.tx_pending);
        self.tx.write(
            i,
            libc::xdp_desc {
                addr,
                len: frame.len() as u32,
                options: 0,
            },
        );
        self.tx_pending += 1;
    }

    /// Publish the queued frames and have the kernel send them (in copy mode the kernel sends
    /// at most a small batch per call, so this calls until the TX ring is drained).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.tx_pending > 0 {
            self.tx.local = self.tx.local.wrapping_add(self.tx_pending);
            self.tx.producer().store(self.tx.local, Ordering::Release);
            self.stats.sent += self.tx_pending as u64;
            self.tx_pending = 0;
        }
        let mut tries = 0;
        while self.tx.consumer().load(Ordering::Acquire) != self.tx.local && tries < 256 {
            tries += 1;
            if !self.tx.needs_wakeup() && tries > 1 {
                break;
            }
            // SAFETY: sendto with no data wakes the kernel to process the TX ring.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if r < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                    | Some(libc::EINTR) => {}
                    _ => return Err(os_err(&format!("sending on {}", self.name))),
                }
            }
        }
        self.reclaim();
        Ok(())
    }

    /// Refresh the kernel's counters of this socket.
    pub fn refresh_stats(&mut self) {
        // SAFETY: xdp_statistics is plain old data; the kernel fills it.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of_val(&st) as u32;
        // SAFETY: getsockopt into a live struct of the given size.
        if unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                &mut st as *mut _ as *mut libc::c_void,
                &mut len,
            )
        } == 0
        {
            self.stats.kernel_dropped = st.rx_dropped;
            self.stats.kernel_ring_full = st.rx_ring_full;
            self.stats.kernel_fill_empty = st.rx_fill_ring_empty_descs;
        }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: our own UMEM mapping, unmapped once; the socket (closed after this, with
        // the rings) no longer uses it once closed, and nothing else points into it.
        unsafe { libc::munmap(self.umem as *mut libc::c_void, self.umem_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_jumps_land_on_their_labels() {
        let p = program(3);
        assert_eq!(p.len(), 25 * 8);
        let code = |pc: usize| p[pc * 8];
        let off = |pc: usize| i16::from_ne_bytes([p[pc * 8 + 2], p[pc * 8 + 3]]) as i64;
        let target = |pc: usize| (pc as i64 + 1 + off(pc)) as usize;
        // every conditional jump goes to REDIRECT (17) or PASS (23)
        for pc in 0..25 {
            if matches!(code(pc), 0x2d | 0x15 | 0x55 | 0x25 | 0x35) {
                assert!(
                    matches!(target(pc), 17 | 23),
                    "jump at {pc} lands on {}",
                    target(pc)
                );
            }
        }
        assert_eq!(target(5), 23);
        assert_eq!(target(7), 17);
        assert_eq!(target(8), 23);
        assert_eq!(target(16), 23);
        // the map load carries the map's descriptor, marked as such
        assert_eq!(code(18), 0x18);
        assert_eq!(p[18 * 8 + 1] >> 4, 1);
        assert_eq!(
            i32::from_ne_bytes(p[18 * 8 + 4..18 * 8 + 8].try_into().unwrap()),
            3
        );
        assert_eq!(code(22), 0x95);
        assert_eq!(code(24), 0x95);
    }
}
