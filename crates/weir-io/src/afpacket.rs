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
}

/// An AF_PACKET socket on one interface.
pub struct Port {
    fd: OwnedFd,
    pub ifindex: u32,
    pub name: String,
    pub mac: [u8; 6],
    bufs: Vec<Vec<u8>>,
    got: Vec<crate::mmsg::Got>,
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

/// The interface's index and MAC address (`SIOCGIFINDEX`, `SIOCGIFHWADDR`).
pub(crate) fn iface(fd: i32, name: &str) -> io::Result<(u32, [u8; 6])> {
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
            n: 0,
            out: Vec::new(),
            out_n: 0,
            stats: Stats::default(),
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Take the frames that are ready (never blocks). Returns how many.
    pub fn recv_batch(&mut self) -> io::Result<usize> {
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
        let g = self.got[i];
        (&mut self.bufs[i][..g.len.min(RX_BUF)], g.truncated)
    }

    pub fn batch_len(&self) -> usize {
        self.n
    }

    /// Frame `i` of the last batch, read-only.
    pub fn frame(&self, i: usize) -> &[u8] {
        &self.bufs[i][..self.got[i].len.min(RX_BUF)]
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
