//! AF_PACKET: weir reads and writes whole Ethernet frames on an interface (inline mode, where
//! weir forwards between interfaces itself). One socket per interface, bound to it for every
//! protocol; frames weir sends are not read back (`PACKET_IGNORE_OUTGOING`). Batched both
//! ways: `recvmmsg` takes up to a batch of frames, `sendmmsg` sends what a batch forwards out
//! of this interface in one call.
//!
//! This is the portable fallback: [`crate::xdp`] is the faster path where the kernel has it.
//!
//! Offloads. Frames from senders on the same host (veth, containers) and frames merged by a
//! NIC's GRO reach weir unfinished: a partial TCP/UDP checksum (`CHECKSUM_PARTIAL`) and, with
//! TSO/GSO/GRO, super-frames of up to 64 KiB. A TPACKET_V3 ring ([`Port::open_ring`]) takes
//! them whole (a frame may fill a block, 1 MiB by default; the `recvmmsg` path cuts frames at
//! 9280 bytes) and tells per frame what the kernel knows ([`Port::rx_offload`]): the ring's
//! `TP_STATUS_CSUMNOTREADY` / `TP_STATUS_CSUM_VALID` / `TP_STATUS_GSO_TCP` bits and, on rings
//! opened with [`RingConfig::vnet_hdr`], the virtio-net header (`PACKET_VNET_HDR`: checksum
//! start and offset, GSO type and segment size). To forward such a frame, complete or cut it
//! with `weir_wire::offload`, or send it on a socket with the header on ([`Port::send_offload`]
//! with a [`VnetHdr`]) so that the kernel or the device does.

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

/// Default ring geometry ([`RingConfig::default`]): blocks of `BLOCK` bytes, `BLOCKS` of
/// them. In a TPACKET_V3 ring a frame may take a whole block (less the block header), so
/// frames of up to about 1 MiB are taken whole, GSO / GRO super-frames of 64 KiB included.
const BLOCK: usize = 1 << 20;
const BLOCKS: usize = 32;
/// The frame size given to the kernel: a V3 receive ring does not cut frames at it (they are
/// packed into blocks at their own length), but it must divide the blocks.
const FRAME_MAX: usize = 16384;
/// A block not yet full goes to weir this long after its first frame.
const RETIRE_MS: u32 = 1;
const TP_STATUS_USER: u32 = 1;
/// Frame status bits (`linux/if_packet.h`).
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_CSUM_VALID: u32 = 1 << 7;
/// Since Linux 6.3 (`TP_STATUS_GSO_TCP`, added with IPv4 BIG TCP): the frame is a TCP GSO
/// super-frame.
const TP_STATUS_GSO_TCP: u32 = 1 << 8;
const PACKET_VNET_HDR: i32 = 15;
/// `struct tpacket_block_desc` with `tpacket_hdr_v1`, aligned to 8: where a block's first
/// frame may start (no private area is asked for).
const BLOCK_HDR: usize = 48;
/// `tp_mac` of a frame in a V3 ring on an Ethernet device: `TPACKET_ALIGN(tpacket3_hdr (48)
/// + sockaddr_ll (20) + 16) - 14`, plus the virtio-net header when it is on.
const MAC_OFF: usize = 82;

/// How [`Port::open_ring_with`] sets up a TPACKET_V3 receive ring.
///
/// Memory: the ring is `block_size * blocks` bytes of kernel memory mapped into weir (and
/// locked when the memlock limit allows): 32 MiB per port by default. A frame takes its
/// length plus about 100 bytes, rounded to 8; a block holds as many as fit and goes to weir
/// when full or 1 ms after its first frame, so a 1 MiB block holds about 15 super-frames of
/// 64 KiB, or 600 full-MTU frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block: a multiple of the page size, at least 4096. A frame longer than
    /// [`RingConfig::largest_frame`] is cut (and counted in [`Stats::truncated`]). Default
    /// 1 MiB.
    pub block_size: usize,
    /// Number of blocks (at least 2). Default 32.
    pub blocks: usize,
    /// Ask the kernel for a virtio-net header in front of every frame (`PACKET_VNET_HDR`):
    /// what it knows of the frame's checksum (`NEEDS_CSUM` with `csum_start` /
    /// `csum_offset`, `DATA_VALID`) and segmentation (`gso_type`, `gso_size`), read with
    /// [`Port::rx_offload`]. The frame bytes still start at the Ethernet header. A socket with
    /// the header also expects one in front of every frame it sends, which costs the kernel
    /// a parse per frame (7-10% of the CPU per forwarded frame, measured with `weir
    /// bench lab`), so such a port sends on a second socket of its interface that has none
    /// (and receives nothing): frames go out as they are ([`Port::has_vnet_hdr`] is false;
    /// [`Port::open_tx_vnet`] gives a port that sends with headers). A frame of a GSO type
    /// the header cannot express (UDP tunnels, GRE, ...) is dropped by the kernel
    /// (`virtio_net_hdr_from_skb` fails) and counted in [`Port::ring_drops`]. Default off.
    pub vnet_hdr: bool,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            block_size: BLOCK,
            blocks: BLOCKS,
            vnet_hdr: false,
        }
    }
}

impl RingConfig {
    /// The longest Ethernet frame taken whole with this geometry: a block less its header
    /// and the frame's header (`tp_mac`). Longer frames are cut to exactly this length
    /// (`tpacket_rcv` clamps `macoff + snaplen` to the block's `max_frame_len`, logging
    /// "packet too big, clamped" once). The frame size given to the kernel plays no part in
    /// a V3 receive ring. 1 MiB blocks: 1,048,486 bytes (with the virtio-net header
    /// 1,048,476), so every GSO / GRO super-frame (at most 64 KiB, or 512 KiB with BIG
    /// TCP) fits.
    pub fn largest_frame(&self) -> usize {
        let mac = MAC_OFF + if self.vnet_hdr { VnetHdr::LEN } else { 0 };
        self.block_size.saturating_sub(BLOCK_HDR + mac)
    }
}

/// The virtio-net header (`struct virtio_net_hdr`, 10 bytes, in the host's byte order as
/// Linux's legacy virtio is) that the kernel writes in front of a frame received on a socket
/// with `PACKET_VNET_HDR`, and that such a socket reads in front of a frame it sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VnetHdr {
    /// [`VnetHdr::F_NEEDS_CSUM`], [`VnetHdr::F_DATA_VALID`].
    pub flags: u8,
    /// [`VnetHdr::GSO_NONE`], [`VnetHdr::GSO_TCPV4`], ..., with [`VnetHdr::GSO_ECN`].
    pub gso_type: u8,
    /// How many bytes of headers (link to transport included). On receive a hint that
    /// varies between kernels (Linux 6.18 gives the link, network and TCP headers of a
    /// super-frame, 0 otherwise).
    pub hdr_len: u16,
    /// Payload bytes per segment of a super-frame.
    pub gso_size: u16,
    /// With `NEEDS_CSUM`: where the checksum's coverage starts, from the Ethernet header.
    pub csum_start: u16,
    /// With `NEEDS_CSUM`: where the checksum field is, from `csum_start` (16 for TCP, 6 for
    /// UDP).
    pub csum_offset: u16,
}

impl VnetHdr {
    pub const LEN: usize = 10;
    /// The checksum is partial: the field holds the pseudo-header sum, the rest is to be
    /// summed from `csum_start` to the end of the packet.
    pub const F_NEEDS_CSUM: u8 = 1;
    /// The checksum was verified.
    pub const F_DATA_VALID: u8 = 2;
    pub const GSO_NONE: u8 = 0;
    pub const GSO_TCPV4: u8 = 1;
    /// UDP fragmentation offload (UFO), deprecated.
    pub const GSO_UDP: u8 = 3;
    pub const GSO_TCPV6: u8 = 4;
    /// UDP segmentation (`UDP_SEGMENT`).
    pub const GSO_UDP_L4: u8 = 5;
    /// Flag in `gso_type`: the super-frame had ECN CWR set (only the first segment keeps it).
    pub const GSO_ECN: u8 = 0x80;

    /// Read a header from its 10 bytes.
    pub fn from_bytes(b: [u8; 10]) -> VnetHdr {
        let w = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: w(2),
            gso_size: w(4),
            csum_start: w(6),
            csum_offset: w(8),
        }
    }

    /// The header's 10 bytes.
    pub fn to_bytes(&self) -> [u8; 10] {
        let mut b = [0u8; 10];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// `NEEDS_CSUM`: the checksum is partial.
    pub fn needs_csum(&self) -> bool {
        self.flags & Self::F_NEEDS_CSUM != 0
    }

    /// `DATA_VALID`: the checksum was verified.
    pub fn data_valid(&self) -> bool {
        self.flags & Self::F_DATA_VALID != 0
    }

    /// With `NEEDS_CSUM`: (`csum_start`, `csum_offset`).
    pub fn csum(&self) -> Option<(u16, u16)> {
        self.needs_csum()
            .then_some((self.csum_start, self.csum_offset))
    }

    /// The segmentation asked for, if any.
    pub fn gso(&self) -> Option<Gso> {
        let kind = match self.gso_type & !Self::GSO_ECN {
            Self::GSO_NONE => return None,
            Self::GSO_TCPV4 => GsoKind::Tcp4,
            Self::GSO_TCPV6 => GsoKind::Tcp6,
            Self::GSO_UDP => GsoKind::Ufo,
            Self::GSO_UDP_L4 => GsoKind::Udp,
            other => GsoKind::Other(other),
        };
        Some(Gso {
            kind,
            size: self.gso_size,
            ecn: self.gso_type & Self::GSO_ECN != 0,
        })
    }

    /// A header that asks for nothing (what [`Port::send_batch`] sends on a socket with the
    /// header on).
    pub fn none() -> VnetHdr {
        VnetHdr::default()
    }

    /// A header for sending a frame whose TCP/UDP checksum is partial (the field holds the
    /// pseudo-header sum, as `weir_wire::offload::set_partial_checksum` leaves it): the kernel
    /// or the device finishes it. `l4_off`: the transport header's offset from the Ethernet
    /// header; `csum_offset`: 16 for TCP, 6 for UDP.
    pub fn partial_csum(l4_off: u16, csum_offset: u16) -> VnetHdr {
        VnetHdr {
            flags: Self::F_NEEDS_CSUM,
            csum_start: l4_off,
            csum_offset,
            ..VnetHdr::default()
        }
    }

    /// A header for sending a TCP super-frame (its checksum partial, as
    /// `weir_wire::offload::set_partial_checksum` leaves it) for the kernel or the device to
    /// cut into segments of `mss` payload bytes: `v6` for IPv6, `l4_off` the TCP header's
    /// offset from the Ethernet header, `tcp_hdr_len` its length with options.
    pub fn tcp_gso(v6: bool, l4_off: u16, tcp_hdr_len: u16, mss: u16) -> VnetHdr {
        VnetHdr {
            flags: Self::F_NEEDS_CSUM,
            gso_type: if v6 { Self::GSO_TCPV6 } else { Self::GSO_TCPV4 },
            hdr_len: l4_off.saturating_add(tcp_hdr_len),
            gso_size: mss,
            csum_start: l4_off,
            csum_offset: 16,
        }
    }
}

/// What a super-frame is to be cut into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GsoKind {
    /// TCP over IPv4 (TSO / GSO / GRO).
    Tcp4,
    /// TCP over IPv6.
    Tcp6,
    /// UDP segmentation (`UDP_SEGMENT`, `SKB_GSO_UDP_L4`): datagrams of `size` payload bytes.
    Udp,
    /// UDP fragmentation offload (UFO), deprecated: one datagram to be IP-fragmented.
    Ufo,
    /// A `gso_type` this code does not know.
    Other(u8),
}

/// Segmentation facts of a super-frame: its kind and the payload bytes per segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gso {
    pub kind: GsoKind,
    /// Payload bytes per segment (the sender's MSS for TCP).
    pub size: u16,
    /// ECN: CWR set on the super-frame, to stay on the first segment only.
    pub ecn: bool,
}

/// What the kernel knows of a received frame's checksum and segmentation
/// ([`Port::rx_offload`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RxOffload {
    /// `TP_STATUS_CSUMNOTREADY`: the TCP/UDP checksum is partial (`CHECKSUM_PARTIAL`: the
    /// field holds the folded pseudo-header sum; a frame from a local sender, or merged by
    /// GRO). To forward it, complete it (`weir_wire::offload::complete_checksum`), or send it
    /// on with a header that says so ([`VnetHdr::partial_csum`]).
    pub csum_partial: bool,
    /// `TP_STATUS_CSUM_VALID`: the device or the kernel verified the checksum.
    pub csum_valid: bool,
    /// `TP_STATUS_GSO_TCP` (Linux 6.3 and later; never set before): a TCP super-frame.
    pub gso_tcp: bool,
    /// From the virtio-net header: the super-frame's kind and segment size. `None` for an
    /// ordinary frame, and on rings without the header.
    pub gso: Option<Gso>,
    /// The virtio-net header the kernel gave (rings opened with
    /// [`RingConfig::vnet_hdr`]).
    pub vnet: Option<VnetHdr>,
    /// The frame is one the kernel itself sent out of the interface (`PACKET_OUTGOING`),
    /// not one received: only on rings that take them ([`Port::take_outgoing`]).
    pub outgoing: bool,
}

/// One frame of the batch in the ring.
#[derive(Clone, Copy, Debug)]
struct RxFrame {
    /// Offset of the frame (its Ethernet header) in the map.
    off: usize,
    snap: usize,
    len: usize,
    status: u32,
    /// The virtio-net header in front of the frame.
    vnet: Option<[u8; 10]>,
    /// `sll_pkttype` is `PACKET_OUTGOING`.
    outgoing: bool,
}

/// A TPACKET_V3 receive ring: `blocks` blocks, each owned by the kernel (filling it) or by
/// weir (status `TP_STATUS_USER`) until weir writes the status back.
struct RxRing {
    map: *mut u8,
    block: usize,
    blocks: usize,
    vnet: bool,
    /// The next block to read.
    next: usize,
    /// The block of the current batch, handed back by `release`.
    held: Option<usize>,
    /// Frames of the current batch.
    frames: Vec<RxFrame>,
}

// SAFETY: the mapping is owned by the ring and used by one thread at a time (the Port moves
// between threads as a whole).
unsafe impl Send for RxRing {}

fn set_int(fd: i32, level: i32, opt: i32, v: i32) -> bool {
    // SAFETY: setsockopt with a live i32 and its size.
    unsafe { libc::setsockopt(fd, level, opt, &v as *const i32 as *const libc::c_void, 4) == 0 }
}

impl RxRing {
    fn new(fd: i32, name: &str, cfg: &RingConfig) -> io::Result<RxRing> {
        let (block, blocks) = (cfg.block_size, cfg.blocks);
        if block < 4096
            || block % 4096 != 0
            || block > u32::MAX as usize
            || !(2..=65536).contains(&blocks)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{name}: receive ring of {blocks} blocks of {block} bytes (blocks: a \
                     multiple of 4096 bytes; 2 to 65536 of them)"
                ),
            ));
        }
        if !set_int(fd, libc::SOL_PACKET, libc::PACKET_VERSION, 2) {
            return Err(os_err(&format!("{name}: TPACKET_V3")));
        }
        // Before the ring: the kernel refuses it (EBUSY) once the ring is there.
        if cfg.vnet_hdr && !set_int(fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1) {
            return Err(os_err(&format!("{name}: PACKET_VNET_HDR")));
        }
        let frame = FRAME_MAX.min(block);
        // tpacket_req3: block size, block count, frame size, frame count, retire timeout,
        // private area size, feature word
        let req: [u32; 7] = [
            block as u32,
            blocks as u32,
            frame as u32,
            (block / frame * blocks) as u32,
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
                block * blocks,
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
                    block * blocks,
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
            block,
            blocks,
            vnet: cfg.vnet_hdr,
            next: 0,
            held: None,
            frames: Vec::new(),
        })
    }

    /// The status word of block `b`.
    fn status(&self, b: usize) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: block `b` < blocks lies in the mapping; its status is an aligned u32 at
        // offset 8 of the block descriptor, which the kernel and weir hand over atomically.
        unsafe { &*(self.map.add(b * self.block + 8) as *const std::sync::atomic::AtomicU32) }
    }

    fn u32_at(&self, off: usize) -> u32 {
        // SAFETY: `off` + 4 lies inside the mapping (callers check against the block bounds).
        unsafe { (self.map.add(off) as *const u32).read_unaligned() }
    }

    fn byte_at(&self, off: usize) -> u8 {
        // SAFETY: `off` lies inside the mapping (callers check against the block bounds).
        unsafe { self.map.add(off).read() }
    }

    /// Take the next block if the kernel handed it over: its frames become the batch.
    fn take(&mut self) -> usize {
        self.frames.clear();
        let b = self.next;
        if self.status(b).load(std::sync::atomic::Ordering::Acquire) & TP_STATUS_USER == 0 {
            return 0;
        }
        let block = self.block;
        let base = b * block;
        let num = self.u32_at(base + 12) as usize;
        let mut off = self.u32_at(base + 16) as usize;
        for _ in 0..num {
            if off < 32 || off + 28 > block {
                break;
            }
            let h = base + off;
            let (snap, len) = (self.u32_at(h + 12) as usize, self.u32_at(h + 16) as usize);
            let status = self.u32_at(h + 20);
            // SAFETY: reading a u16 inside the frame header (checked in bounds above).
            let mac = unsafe { (self.map.add(h + 24) as *const u16).read_unaligned() } as usize;
            if off + mac + snap > block {
                break;
            }
            let vnet = if self.vnet && mac >= 48 + VnetHdr::LEN {
                let mut v = [0u8; 10];
                // SAFETY: the 10 bytes before the frame lie in the block, after the 48-byte
                // frame header (checked above: off + mac <= block, and mac >= 58).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.map.add(h + mac - VnetHdr::LEN),
                        v.as_mut_ptr(),
                        VnetHdr::LEN,
                    )
                };
                Some(v)
            } else {
                None
            };
            // the sockaddr_ll after the 48-byte frame header: sll_pkttype at its byte 10
            let outgoing = mac >= 60 && self.byte_at(h + 58) == libc::PACKET_OUTGOING;
            self.frames.push(RxFrame {
                off: h + mac,
                snap,
                len,
                status,
                vnet,
                outgoing,
            });
            let next = self.u32_at(h) as usize;
            if next == 0 {
                break;
            }
            off += next;
        }
        self.held = Some(b);
        self.next = (b + 1) % self.blocks;
        self.frames.len()
    }

    fn truncated_in_batch(&self) -> usize {
        self.frames.iter().filter(|f| f.snap < f.len).count()
    }

    fn frame_mut(&mut self, i: usize) -> (&mut [u8], bool) {
        let f = self.frames[i];
        // SAFETY: the frame lies inside the held block (checked in `take`), which the kernel
        // does not touch until `release`; one frame is borrowed at a time.
        (
            unsafe { std::slice::from_raw_parts_mut(self.map.add(f.off), f.snap) },
            f.snap < f.len,
        )
    }

    fn frame(&self, i: usize) -> &[u8] {
        let f = self.frames[i];
        // SAFETY: as in `frame_mut`.
        unsafe { std::slice::from_raw_parts(self.map.add(f.off), f.snap) }
    }

    fn offload(&self, i: usize) -> RxOffload {
        let Some(f) = self.frames.get(i) else {
            return RxOffload::default();
        };
        let vnet = f.vnet.map(VnetHdr::from_bytes);
        RxOffload {
            csum_partial: f.status & TP_STATUS_CSUMNOTREADY != 0,
            csum_valid: f.status & TP_STATUS_CSUM_VALID != 0,
            gso_tcp: f.status & TP_STATUS_GSO_TCP != 0,
            gso: vnet.and_then(|v| v.gso()),
            vnet,
            outgoing: f.outgoing,
        }
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
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.block * self.blocks) };
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
    /// The socket has `PACKET_VNET_HDR` on: every frame sent carries a virtio-net header.
    vnet_tx: bool,
    /// A ring with the virtio-net header sends on this second socket, which has none (see
    /// [`RingConfig::vnet_hdr`]).
    tx: Option<OwnedFd>,
    /// The errno of the last frame the kernel refused on send (0: none yet).
    last_send_errno: i32,
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

/// The mark (`SO_MARK`) of the frames weir's own ports send (its forwarded frames, its ARP
/// and neighbour discovery), so that a socket watching what leaves an interface
/// ([`Port::open_monitor`]) tells them from the kernel's own.
pub const TX_MARK: u32 = 0x7765_6978;

/// One classic BPF instruction.
fn cbpf(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

const SKF_AD_PROTOCOL: u32 = 0xffff_f000;
const SKF_AD_PKTTYPE: u32 = 0xffff_f004;
const SKF_AD_MARK: u32 = 0xffff_f014;
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
const AND_K: u16 = 0x54;

impl Port {
    /// Set the mark (`SO_MARK`) of what this socket sends.
    pub fn set_mark(&self, mark: u32) -> io::Result<()> {
        if self
            .sockets()
            .all(|fd| set_int(fd, libc::SOL_SOCKET, libc::SO_MARK, mark as i32))
        {
            Ok(())
        } else {
            Err(os_err(&format!("{}: SO_MARK", self.name)))
        }
    }

    /// Attach a classic BPF socket filter (what it returns 0 for is not delivered).
    pub fn attach_filter(&self, prog: &[libc::sock_filter]) -> io::Result<()> {
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: setsockopt with a live sock_fprog pointing at `prog`, which outlives the
        // call (the kernel copies the program).
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                &fprog as *const libc::sock_fprog as *const libc::c_void,
                std::mem::size_of::<libc::sock_fprog>() as u32,
            )
        };
        if r < 0 {
            return Err(os_err(&format!("{}: SO_ATTACH_FILTER", self.name)));
        }
        Ok(())
    }

    /// Take no frame that carries a mark of `mark`'s family ([`crate::inject::INJECT_MASK`]:
    /// the frames weir hands back to the kernel, which enter the interface again).
    pub fn ignore_marked(&self, mark: u32) -> io::Result<()> {
        self.attach_filter(&[
            cbpf(LD_W_ABS, 0, 0, SKF_AD_MARK),
            cbpf(AND_K, 0, 0, crate::inject::INJECT_MASK),
            cbpf(JEQ_K, 0, 1, mark & crate::inject::INJECT_MASK),
            cbpf(RET_K, 0, 0, 0),
            cbpf(RET_K, 0, 0, u32::MAX),
        ])
    }

    /// What this socket takes of what passes the interface, as a filter in the kernel: no
    /// frame marked in `skip`'s family (those weir hands back to the kernel,
    /// [`crate::inject::INJECT_MASK`]); with
    /// `outgoing`, also the IPv4 and IPv6 frames the kernel itself sends out of the
    /// interface, but those weir's own sockets sent ([`TX_MARK`]), told apart by
    /// [`RxOffload::outgoing`]. Without, no outgoing frame, in a fanout group too (whose
    /// members the socket option `PACKET_IGNORE_OUTGOING` does not cover). One socket
    /// then serves a port's receiving and the watch of what the kernel sends from it (local
    /// delivery), instead of a second tap that every received frame would be cloned to
    /// ([`Port::open_monitor`]).
    pub fn take_outgoing(&self, skip: u32, outgoing: bool) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        if !set_int(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            (!outgoing) as i32,
        ) {
            return Err(os_err(&format!("{}: PACKET_IGNORE_OUTGOING", self.name)));
        }
        const PACKET_OUTGOING: u32 = libc::PACKET_OUTGOING as u32;
        if outgoing {
            self.attach_filter(&[
                cbpf(LD_W_ABS, 0, 0, SKF_AD_MARK),
                cbpf(AND_K, 0, 0, crate::inject::INJECT_MASK),
                cbpf(JEQ_K, 8, 0, skip & crate::inject::INJECT_MASK),
                cbpf(LD_W_ABS, 0, 0, SKF_AD_PKTTYPE),
                cbpf(JEQ_K, 0, 5, PACKET_OUTGOING),
                cbpf(LD_W_ABS, 0, 0, SKF_AD_MARK),
                cbpf(JEQ_K, 4, 0, TX_MARK),
                cbpf(LD_W_ABS, 0, 0, SKF_AD_PROTOCOL),
                cbpf(JEQ_K, 1, 0, 0x0800),
                cbpf(JEQ_K, 0, 1, 0x86dd),
                cbpf(RET_K, 0, 0, u32::MAX),
                cbpf(RET_K, 0, 0, 0),
            ])
        } else {
            self.attach_filter(&[
                cbpf(LD_W_ABS, 0, 0, SKF_AD_MARK),
                cbpf(AND_K, 0, 0, crate::inject::INJECT_MASK),
                cbpf(JEQ_K, 3, 0, skip & crate::inject::INJECT_MASK),
                cbpf(LD_W_ABS, 0, 0, SKF_AD_PKTTYPE),
                cbpf(JEQ_K, 1, 0, PACKET_OUTGOING),
                cbpf(RET_K, 0, 0, u32::MAX),
                cbpf(RET_K, 0, 0, 0),
            ])
        }
    }

    /// A socket that reads what the kernel itself sends out of interface `name`: outgoing
    /// IPv4 and IPv6 frames, but those weir's own sockets sent ([`TX_MARK`]) or handed back
    /// (marked in `skip`'s family, [`crate::inject::INJECT_MASK`]).
    pub fn open_monitor(name: &str, batch: usize, skip: u32) -> io::Result<Port> {
        let (fd, ifindex, mac) = bound_socket(name, (libc::ETH_P_ALL as u16).to_be())?;
        let batch = batch.clamp(1, 1024);
        let p = Port {
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
            vnet_tx: false,
            tx: None,
            last_send_errno: 0,
            stats: Stats::default(),
        };
        p.attach_filter(&[
            cbpf(LD_W_ABS, 0, 0, SKF_AD_PKTTYPE),
            cbpf(JEQ_K, 0, 7, libc::PACKET_OUTGOING as u32),
            cbpf(LD_W_ABS, 0, 0, SKF_AD_MARK),
            cbpf(JEQ_K, 5, 0, TX_MARK),
            cbpf(AND_K, 0, 0, crate::inject::INJECT_MASK),
            cbpf(JEQ_K, 3, 0, skip & crate::inject::INJECT_MASK),
            cbpf(LD_W_ABS, 0, 0, SKF_AD_PROTOCOL),
            cbpf(JEQ_K, 2, 0, 0x0800),
            cbpf(JEQ_K, 1, 0, 0x86dd),
            cbpf(RET_K, 0, 0, 0),
            cbpf(RET_K, 0, 0, u32::MAX),
        ])?;
        Ok(p)
    }

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
            vnet_tx: false,
            tx: None,
            last_send_errno: 0,
            stats: Stats::default(),
        })
    }

    /// A send-only socket on interface `name` (it takes no frames) whose frames go through
    /// the interface's queueing discipline and egress hooks (as [`crate::inject`] needs).
    pub fn open_send(name: &str) -> io::Result<Port> {
        // protocol 0: no frame is delivered to it
        let (fd, ifindex, mac) = bound_socket(name, 0)?;
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
            vnet_tx: false,
            tx: None,
            last_send_errno: 0,
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
            vnet_tx: false,
            tx: None,
            last_send_errno: 0,
            stats: Stats::default(),
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The port's sockets: the one it reads, and the one it sends on when that is another.
    fn sockets(&self) -> impl Iterator<Item = i32> + '_ {
        std::iter::once(self.fd.as_raw_fd()).chain(self.tx.as_ref().map(|t| t.as_raw_fd()))
    }

    /// The socket frames are sent on.
    fn send_fd(&self) -> i32 {
        self.tx.as_ref().unwrap_or(&self.fd).as_raw_fd()
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
    /// done. A block is handed to weir when full or `RETIRE_MS` after its first frame. The
    /// ring is [`RingConfig::default`]: 32 blocks of 1 MiB, frames of up to about 1 MiB taken
    /// whole (super-frames of 64 KiB included), no virtio-net header.
    pub fn open_ring(name: &str) -> io::Result<Port> {
        Port::open_ring_with(name, RingConfig::default())
    }

    /// As [`Port::open_ring`], with the ring's geometry and the virtio-net header as `cfg`
    /// says. With [`RingConfig::vnet_hdr`], [`Port::rx_offload`] gives each frame's header.
    pub fn open_ring_with(name: &str, cfg: RingConfig) -> io::Result<Port> {
        let mut p = Port::open(name, 1)?;
        p.bufs = Vec::new();
        p.got = Vec::new();
        p.ring = Some(RxRing::new(p.fd.as_raw_fd(), name, &cfg)?);
        if cfg.vnet_hdr {
            // protocol 0: nothing is delivered to it
            let (tx, _, _) = bound_socket(name, 0)?;
            p.tx = Some(tx);
        }
        Ok(p)
    }

    /// What the kernel knows of frame `i` of the last batch's checksum and segmentation: the
    /// ring's `TP_STATUS_CSUMNOTREADY`, `TP_STATUS_CSUM_VALID` and `TP_STATUS_GSO_TCP` bits,
    /// and the virtio-net header on rings opened with [`RingConfig::vnet_hdr`]. All false /
    /// `None` without a ring (`recvmmsg` gives none of this) and for an `i` out of the batch.
    pub fn rx_offload(&self, i: usize) -> RxOffload {
        match &self.ring {
            Some(r) if i < self.n => r.offload(i),
            _ => RxOffload::default(),
        }
    }

    /// As [`Port::open_tx`], with `PACKET_VNET_HDR` on: [`Port::send_offload`] sends each
    /// frame with a virtio-net header, so the kernel (or the device) finishes partial
    /// checksums and cuts super-frames of up to 64 KiB (larger than the MTU) into segments.
    /// Unlike [`Port::open_tx`] the frames go through the queueing discipline: with
    /// `PACKET_QDISC_BYPASS` the kernel drops every frame it would have to segment or
    /// checksum in software (`__dev_direct_xmit` in `net/core/dev.c` drops the skb when
    /// `validate_xmit_skb_list` replaces it), so super-frames would reach only devices
    /// with TSO.
    pub fn open_tx_vnet(name: &str) -> io::Result<Port> {
        let mut p = Port::open_tx(name)?;
        let fd = p.fd.as_raw_fd();
        if !set_int(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 0) {
            return Err(os_err(&format!("{name}: PACKET_QDISC_BYPASS off")));
        }
        if !set_int(fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1) {
            return Err(os_err(&format!("{name}: PACKET_VNET_HDR")));
        }
        p.vnet_tx = true;
        Ok(p)
    }

    /// Send what this socket sends straight to the device's driver (`PACKET_QDISC_BYPASS`),
    /// past the queueing discipline, the taps (packet sockets reading outgoing frames,
    /// `tcpdump`) and the tc egress hook, as AF_XDP sends. Only for frames that need nothing
    /// of the kernel: `__dev_direct_xmit` drops a frame that needs a checksum finished or
    /// software segmentation, so [`Port::send_offload`] with such headers must not be used
    /// on it.
    pub fn bypass_qdisc(&self, on: bool) -> io::Result<()> {
        if self
            .sockets()
            .all(|fd| set_int(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, on as i32))
        {
            Ok(())
        } else {
            Err(os_err(&format!("{}: PACKET_QDISC_BYPASS", self.name)))
        }
    }

    /// True when every frame sent on this socket carries a virtio-net header (ports from
    /// [`Port::open_tx_vnet`], and rings opened with [`RingConfig::vnet_hdr`]): then
    /// [`Port::send_offload`] can be used.
    pub fn has_vnet_hdr(&self) -> bool {
        self.vnet_tx
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

    /// Send frames out of this interface in one `sendmmsg`. On a socket with the
    /// virtio-net header on ([`Port::has_vnet_hdr`]) each goes with an empty one (no
    /// checksum or segmentation asked for), so the frames are sent as they are either way.
    pub fn send_batch(&mut self, frames: &[&[u8]]) -> io::Result<()> {
        let none = VnetHdr::none();
        self.send_msgs(frames.len(), |i| (frames[i], &none));
        Ok(())
    }

    /// Send frames, each with its virtio-net header, in one `sendmmsg`: the kernel finishes
    /// a partial checksum ([`VnetHdr::partial_csum`]) and cuts a super-frame
    /// ([`VnetHdr::tcp_gso`]; in software when the device cannot) as it would a local
    /// sender's. Only on a socket with the header on ([`Port::has_vnet_hdr`]), else an
    /// `InvalidInput` error and nothing sent. A frame the kernel refuses (a header that does
    /// not match the frame) is counted in [`Stats::send_errors`] and skipped.
    pub fn send_offload(&mut self, frames: &[(&[u8], VnetHdr)]) -> io::Result<()> {
        if !self.vnet_tx {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: sending with virtio-net headers needs a socket with PACKET_VNET_HDR",
                    self.name
                ),
            ));
        }
        self.send_msgs(frames.len(), |i| (frames[i].0, &frames[i].1));
        Ok(())
    }

    /// Why the kernel refused the last frame it refused on send (counted in
    /// [`Stats::send_errors`]), if it ever did.
    pub fn last_send_error(&self) -> Option<io::Error> {
        (self.last_send_errno != 0).then(|| io::Error::from_raw_os_error(self.last_send_errno))
    }

    /// `sendmmsg` of `n` frames, `get(i)` giving frame `i` and its header (sent only on a
    /// socket with the header on).
    fn send_msgs<'a>(&mut self, n: usize, get: impl Fn(usize) -> (&'a [u8], &'a VnetHdr)) {
        if n == 0 {
            return;
        }
        let hdrs: Vec<[u8; 10]> = (0..n).map(|i| get(i).1.to_bytes()).collect();
        let mut iov: Vec<[libc::iovec; 2]> = (0..n)
            .map(|i| {
                let f = get(i).0;
                let frame = libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                };
                if self.vnet_tx {
                    let h = libc::iovec {
                        iov_base: hdrs[i].as_ptr() as *mut libc::c_void,
                        iov_len: VnetHdr::LEN,
                    };
                    [h, frame]
                } else {
                    [frame, frame]
                }
            })
            .collect();
        let iovlen = if self.vnet_tx { 2 } else { 1 };
        // SAFETY: mmsghdr is plain old data; zeroed, then each points at its own iovecs.
        let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v.as_mut_ptr();
            m.msg_hdr.msg_iovlen = iovlen;
        }
        let mut done = 0usize;
        while done < msgs.len() {
            // SAFETY: the headers point at frames the caller keeps alive for the call and at
            // `hdrs`, alive here; the socket is bound to the interface, so no address is
            // needed.
            let sent = unsafe {
                libc::sendmmsg(
                    self.send_fd(),
                    msgs[done..].as_mut_ptr(),
                    (msgs.len() - done) as u32,
                    0,
                )
            };
            if sent <= 0 {
                // the frame that failed is counted and skipped; the rest are tried again
                self.last_send_errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
                self.stats.send_errors += 1;
                done += 1;
                continue;
            }
            done += sent as usize;
            self.stats.sent += sent as u64;
        }
    }
}
