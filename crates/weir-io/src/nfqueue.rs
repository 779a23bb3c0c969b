//! NFQUEUE over `nfnetlink_queue`: the kernel hands weir the packets a rule queues
//! (`iptables -j NFQUEUE --queue-num N`), weir answers each with a verdict and, when it changed
//! the packet, the new bytes.
//!
//! Batched both ways: one `recvmmsg` takes up to a batch of queued packets, and the verdicts
//! of a batch go back concatenated in one `send` (netlink carries several messages per
//! datagram). The queue is configured with `NFQA_CFG_F_FAIL_OPEN` (when the queue is full the
//! kernel accepts instead of dropping) and `NFQA_CFG_F_GSO` (large GSO packets are queued
//! whole, not segmented first); each packet comes with its input and output interface
//! indexes, mark and hook.
//!
//! The wire format is `linux/netfilter/nfnetlink_queue.h`: a `nlmsghdr`, a `nfgenmsg` (family,
//! version, queue number in network order) and netlink attributes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_NETFILTER: i32 = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;

const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_CFG_CMD_UNBIND: u8 = 2;
const NFQNL_COPY_PACKET: u8 = 2;
/// Accept packets when the queue is full instead of dropping them.
pub const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
/// Queue GSO packets whole.
pub const NFQA_CFG_F_GSO: u32 = 4;
/// Send the owner (fsuid / fsgid) of a local socket's packets (`meta skuid` / `skgid`).
pub const NFQA_CFG_F_UID_GID: u32 = 8;

const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_MARK: u16 = 3;
const NFQA_IFINDEX_INDEV: u16 = 5;
const NFQA_IFINDEX_OUTDEV: u16 = 6;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;
const NFQA_SKB_INFO: u16 = 14;
const NFQA_UID: u16 = 16;
const NFQA_GID: u16 = 17;

const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const SOL_NETLINK: i32 = 270;
const NETLINK_NO_ENOBUFS: i32 = 5;

/// The largest packet the kernel may queue (a GSO packet), plus headers.
const RX_BUF: usize = 65536 + 512;

/// A verdict for a queued packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Drop,
    Accept,
}

/// Queue settings.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Packets the kernel holds for weir before fail-open accepts (or drops) the rest.
    pub max_len: u32,
    /// Accept (true) or drop (false) what does not fit in the queue.
    pub fail_open: bool,
    /// Packets taken per `recvmmsg`.
    pub batch: usize,
    /// Bytes of each packet copied to weir (0xffff: all; fewer when weir only reads headers
    /// and never rewrites: the kernel copies less, `Packet::cap_len` gives the whole length).
    pub copy_range: u16,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_len: 4096,
            fail_open: true,
            batch: 64,
            copy_range: 0xffff,
        }
    }
}

/// One queued packet (views into the receive buffer).
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// The kernel's id for the verdict.
    pub id: u32,
    /// The link-layer protocol (0x0800 IPv4, 0x86dd IPv6).
    pub hw_protocol: u16,
    /// The netfilter hook it was queued at (0 prerouting, 1 input, 2 forward, 3 output, 4
    /// postrouting).
    pub hook: u8,
    pub mark: u32,
    /// Interface indexes (0: none).
    pub indev: u32,
    pub outdev: u32,
    /// The IP packet.
    pub payload: &'a [u8],
    /// The packet's length when the payload was cut (never with the full copy range).
    pub cap_len: Option<u32>,
    /// `NFQA_SKB_INFO` flags: [`SKB_CSUMNOTREADY`] (the transport checksum is left to the
    /// sender's offload), [`SKB_GSO`], [`SKB_CSUM_NOTVERIFIED`] (nobody checked it yet).
    /// 0 when the kernel sent none: a checksum already verified.
    pub skb_info: u32,
    /// The owner of the packet's socket (`NFQA_UID` / `NFQA_GID`): a local process's packets;
    /// None for forwarded ones, as the kernel has no socket for them.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// [`Packet::skb_info`] flags.
pub const SKB_CSUMNOTREADY: u32 = 1;
pub const SKB_GSO: u32 = 2;
pub const SKB_CSUM_NOTVERIFIED: u32 = 4;

impl Packet<'_> {
    /// The transport checksum need not be checked: the kernel verified it, or it is left to
    /// the sender's offload (as Linux's `skb_csum_unnecessary` for `nf_reject`).
    pub fn checksum_trusted(&self) -> bool {
        self.skb_info & SKB_CSUMNOTREADY != 0 || self.skb_info & SKB_CSUM_NOTVERIFIED == 0
    }
}

/// Counters of the queue's traffic.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub packets: u64,
    pub batches: u64,
    pub verdicts: u64,
    pub sends: u64,
    /// Netlink error messages the kernel answered verdicts with (an unknown id, ...).
    pub errors: u64,
    /// Messages weir could not parse.
    pub malformed: u64,
}

/// A bound NFQUEUE queue.
pub struct Queue {
    fd: OwnedFd,
    num: u16,
    seq: u32,
    bufs: Vec<Vec<u8>>,
    got: Vec<crate::mmsg::Got>,
    n: usize,
    tx: Vec<u8>,
    /// The receive timeout set on the socket (ms).
    timeout_ms: i32,
    pub stats: Stats,
}

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn push_params(b: &mut Vec<u8>, range: u16) {
    let mut params = (range as u32).to_be_bytes().to_vec();
    params.push(NFQNL_COPY_PACKET);
    push_attr(b, NFQA_CFG_PARAMS, &params);
}

fn push_attr(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(data);
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// Start a message: nlmsghdr (length patched by [`end_msg`]) and nfgenmsg.
fn start_msg(buf: &mut Vec<u8>, msg: u16, flags: u16, seq: u32, queue: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.push(libc::AF_UNSPEC as u8);
    buf.push(0); // NFNETLINK_V0
    buf.extend_from_slice(&queue.to_be_bytes());
    at
}

fn end_msg(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_ne_bytes());
}

/// Attributes of a netlink message body: (type without flags, payload). (Also rtnetlink's.)
pub(crate) fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let data = &b[4..len];
        b = &b[len.next_multiple_of(4).min(b.len())..];
        Some((ty, data))
    })
}

fn be32(d: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(..4)?.try_into().ok()?))
}

/// Parse one `NFQNL_MSG_PACKET` body (after the nfgenmsg).
fn parse_packet(body: &[u8]) -> Option<Packet<'_>> {
    let mut p = Packet {
        id: 0,
        hw_protocol: 0,
        hook: 0,
        mark: 0,
        indev: 0,
        outdev: 0,
        payload: &[],
        cap_len: None,
        skb_info: 0,
        uid: None,
        gid: None,
    };
    let mut hdr = false;
    for (ty, d) in attrs(body) {
        match ty {
            NFQA_PACKET_HDR if d.len() >= 7 => {
                p.id = be32(d)?;
                p.hw_protocol = u16::from_be_bytes([d[4], d[5]]);
                p.hook = d[6];
                hdr = true;
            }
            NFQA_MARK => p.mark = be32(d)?,
            NFQA_IFINDEX_INDEV => p.indev = be32(d)?,
            NFQA_IFINDEX_OUTDEV => p.outdev = be32(d)?,
            NFQA_PAYLOAD => p.payload = d,
            NFQA_CAP_LEN => p.cap_len = be32(d),
            NFQA_SKB_INFO => p.skb_info = be32(d)?,
            NFQA_UID => p.uid = be32(d),
            NFQA_GID => p.gid = be32(d),
            _ => {}
        }
    }
    hdr.then_some(p)
}

impl Queue {
    /// Open a netlink socket and bind queue `num`. Errors name the cause: no permission
    /// (CAP_NET_ADMIN), the queue bound by another process, no nfnetlink_queue in the kernel.
    pub fn open(num: u16, opts: &Options) -> io::Result<Queue> {
        // SAFETY: plain socket(2) call; the returned descriptor is checked and owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_NETFILTER,
            )
        };
        if fd < 0 {
            return Err(os_err("netlink socket"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain old data; zeroed is a valid value, then filled.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `sa` is a valid sockaddr_nl and its size is passed with it.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if r < 0 {
            return Err(os_err("netlink bind"));
        }
        let one: i32 = 1;
        let rcvbuf: i32 = 16 << 20;
        // SAFETY: setsockopt with pointers to live i32 values and their sizes. Failures are
        // not fatal (smaller buffers, ENOBUFS reported): ignored.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                SOL_NETLINK,
                NETLINK_NO_ENOBUFS,
                &one as *const i32 as *const libc::c_void,
                4,
            );
            if libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &rcvbuf as *const i32 as *const libc::c_void,
                4,
            ) < 0
            {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    &rcvbuf as *const i32 as *const libc::c_void,
                    4,
                );
            }
        }
        let batch = opts.batch.clamp(1, 1024);
        let mut q = Queue {
            fd,
            num,
            seq: 1,
            bufs: (0..batch).map(|_| vec![0u8; RX_BUF]).collect(),
            got: vec![Default::default(); batch],
            n: 0,
            tx: Vec::with_capacity(64 * 1024),
            timeout_ms: -1,
            stats: Stats::default(),
        };
        q.config(|b| {
            push_attr(b, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
        })
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => io::Error::new(
                e.kind(),
                format!("NFQUEUE {num} is bound by another process ({e})"),
            ),
            // the kernel answers EPERM both without the capability and when another socket
            // owns the queue; as root it is the latter
            // SAFETY: geteuid has no preconditions.
            Some(libc::EPERM) if unsafe { libc::geteuid() } == 0 => io::Error::new(
                e.kind(),
                format!("NFQUEUE {num} is bound by another process ({e})"),
            ),
            Some(libc::EPERM) => io::Error::new(
                e.kind(),
                format!(
                    "binding NFQUEUE {num} needs CAP_NET_ADMIN, or another process has bound it ({e})"
                ),
            ),
            _ => io::Error::new(e.kind(), format!("binding NFQUEUE {num}: {e}")),
        })?;
        q.config(|b| push_params(b, opts.copy_range))?;
        q.config(|b| push_attr(b, NFQA_CFG_QUEUE_MAXLEN, &opts.max_len.to_be_bytes()))?;
        let flags = NFQA_CFG_F_GSO
            | NFQA_CFG_F_UID_GID
            | if opts.fail_open {
                NFQA_CFG_F_FAIL_OPEN
            } else {
                0
            };
        q.config(|b| {
            push_attr(b, NFQA_CFG_FLAGS, &flags.to_be_bytes());
            push_attr(
                b,
                NFQA_CFG_MASK,
                &(NFQA_CFG_F_GSO | NFQA_CFG_F_UID_GID | NFQA_CFG_F_FAIL_OPEN).to_be_bytes(),
            );
        })?;
        Ok(q)
    }

    pub fn num(&self) -> u16 {
        self.num
    }

    /// Change the copy range while packets flow (not acknowledged: an error would arrive in
    /// the packet stream and be counted in `stats.errors`).
    pub fn set_copy_range(&mut self, range: u16) -> io::Result<()> {
        let mut b = Vec::with_capacity(64);
        self.seq = self.seq.wrapping_add(1);
        let at = start_msg(&mut b, NFQNL_MSG_CONFIG, 0, self.seq, self.num);
        push_params(&mut b, range);
        end_msg(&mut b, at);
        self.send(&b)
    }

    /// Send one config message and wait for its acknowledgement.
    fn config(&mut self, attrs: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        let mut b = Vec::with_capacity(64);
        self.seq = self.seq.wrapping_add(1);
        let at = start_msg(&mut b, NFQNL_MSG_CONFIG, NLM_F_ACK, self.seq, self.num);
        attrs(&mut b);
        end_msg(&mut b, at);
        self.send(&b)?;
        // the acknowledgement (packets may already be queued before it: kept for the caller
        // is not possible here, as the queue is being configured; none are queued yet)
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: recv into a live, writable buffer of the given length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                )
            };
            if n < 0 {
                return Err(os_err("netlink recv"));
            }
            let mut m = &buf[..n as usize];
            while m.len() >= NLMSG_HDRLEN {
                let len = u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize;
                let ty = u16::from_ne_bytes([m[4], m[5]]);
                let seq = u32::from_ne_bytes(m[8..12].try_into().unwrap());
                if len < NLMSG_HDRLEN || len > m.len() {
                    break;
                }
                if ty == NLMSG_ERROR && seq == self.seq && len >= NLMSG_HDRLEN + 4 {
                    let err = i32::from_ne_bytes(m[16..20].try_into().unwrap());
                    return if err == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-err))
                    };
                }
                m = &m[len.next_multiple_of(4).min(m.len())..];
            }
        }
    }

    fn send(&mut self, b: &[u8]) -> io::Result<()> {
        // SAFETY: send a live buffer of the given length on our own socket.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                b.as_ptr() as *const libc::c_void,
                b.len(),
                0,
            )
        };
        if n < 0 {
            return Err(os_err("netlink send"));
        }
        self.stats.sends += 1;
        Ok(())
    }

    /// Wait up to `timeout_ms` for queued packets, then take as many as are ready (up to the
    /// batch size) in one `recvmmsg`. Returns how many datagrams arrived (0 on timeout or a
    /// signal).
    pub fn recv_batch(&mut self, timeout_ms: i32) -> io::Result<usize> {
        // one system call: block (up to the timeout, or a signal) for the first packet, then
        // take what else is ready (MSG_WAITFORONE)
        if self.timeout_ms != timeout_ms {
            let tv = libc::timeval {
                tv_sec: (timeout_ms / 1000) as libc::time_t,
                tv_usec: ((timeout_ms % 1000) * 1000) as libc::suseconds_t,
            };
            // SAFETY: setsockopt with a live timeval and its size.
            let r = unsafe {
                libc::setsockopt(
                    self.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    &tv as *const libc::timeval as *const libc::c_void,
                    std::mem::size_of::<libc::timeval>() as u32,
                )
            };
            if r < 0 {
                return Err(os_err("SO_RCVTIMEO"));
            }
            self.timeout_ms = timeout_ms;
        }
        self.recvmmsg()
    }

    fn recvmmsg(&mut self) -> io::Result<usize> {
        self.n = 0;
        let r = crate::mmsg::recv(
            self.fd.as_raw_fd(),
            &mut self.bufs,
            &mut self.got,
            libc::MSG_WAITFORONE,
        );
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                    // the socket buffer overflowed: packets were lost (fail-open accepted them or
                    // the kernel dropped them); go on
                    Some(libc::ENOBUFS) => {
                        self.stats.errors += 1;
                        Ok(0)
                    }
                    _ => Err(io::Error::new(e.kind(), format!("recvmmsg: {e}"))),
                };
            }
        };
        self.n = n;
        self.stats.batches += 1;
        Ok(n)
    }

    /// Where the packets of the last batch are: (buffer, payload range, packet with an
    /// empty payload). Netlink errors and unparsable messages are counted and skipped.
    fn locate(&mut self) -> Vec<(usize, std::ops::Range<usize>, Packet<'static>)> {
        let mut out = Vec::with_capacity(self.n);
        let (mut errors, mut malformed) = (0, 0);
        for (bi, (buf, g)) in self.bufs.iter().zip(&self.got).take(self.n).enumerate() {
            let len = g.len;
            let all = &buf[..len.min(buf.len())];
            let mut off = 0;
            while all.len() - off >= NLMSG_HDRLEN {
                let m = &all[off..];
                let mlen = u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize;
                let ty = u16::from_ne_bytes([m[4], m[5]]);
                if mlen < NLMSG_HDRLEN || mlen > m.len() {
                    malformed += 1;
                    break;
                }
                if ty == NLMSG_ERROR {
                    let err = m
                        .get(16..20)
                        .map_or(0, |e| i32::from_ne_bytes(e.try_into().unwrap()));
                    if err != 0 {
                        errors += 1;
                    }
                } else if ty == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
                    && mlen >= NLMSG_HDRLEN + 4
                {
                    let body_at = off + NLMSG_HDRLEN + 4;
                    match parse_packet(&all[body_at..off + mlen]) {
                        Some(p) => {
                            let start = p.payload.as_ptr() as usize - all.as_ptr() as usize;
                            let range = start..start + p.payload.len();
                            out.push((bi, range, Packet { payload: &[], ..p }));
                        }
                        None => malformed += 1,
                    }
                } else if ty != NLMSG_DONE {
                    malformed += 1;
                }
                off += mlen.next_multiple_of(4).min(m.len());
            }
        }
        self.stats.errors += errors;
        self.stats.malformed += malformed;
        self.stats.packets += out.len() as u64;
        out
    }

    /// The packets of the last batch (netlink errors and unparsable messages are counted and
    /// skipped).
    pub fn packets(&mut self) -> Vec<Packet<'_>> {
        let loc = self.locate();
        loc.into_iter()
            .map(|(bi, r, p)| Packet {
                payload: &self.bufs[bi][r],
                ..p
            })
            .collect()
    }

    /// The packets of the last batch with writable payloads: weir processes them in place
    /// (no copy), and returns the changed ones with their verdicts.
    pub fn packets_mut(&mut self) -> Vec<(Packet<'static>, &mut [u8])> {
        let loc = self.locate();
        let mut out = Vec::with_capacity(loc.len());
        let mut rest: Vec<Option<&mut [u8]>> = self
            .bufs
            .iter_mut()
            .map(|b| Some(b.as_mut_slice()))
            .collect();
        let mut taken = vec![0usize; rest.len()];
        for (bi, r, p) in loc {
            // payloads of one buffer come in increasing order: split off each in turn
            let Some(b) = rest[bi].take() else { continue };
            let (_, tail) = b.split_at_mut(r.start - taken[bi]);
            let (payload, after) = tail.split_at_mut(r.len());
            taken[bi] = r.end;
            rest[bi] = Some(after);
            out.push((p, payload));
        }
        out
    }

    /// Add a verdict to the pending batch (`payload`: the packet's new bytes when weir
    /// rewrote it; `mark`: a new mark).
    pub fn verdict(&mut self, id: u32, v: Verdict, payload: Option<&[u8]>, mark: Option<u32>) {
        let at = start_msg(&mut self.tx, NFQNL_MSG_VERDICT, 0, 0, self.num);
        let mut vh = [0u8; 8];
        vh[..4].copy_from_slice(&(v as u32).to_be_bytes());
        vh[4..].copy_from_slice(&id.to_be_bytes());
        push_attr(&mut self.tx, NFQA_VERDICT_HDR, &vh);
        if let Some(m) = mark {
            push_attr(&mut self.tx, NFQA_MARK, &m.to_be_bytes());
        }
        if let (Some(p), Verdict::Accept) = (payload, v) {
            push_attr(&mut self.tx, NFQA_PAYLOAD, p);
        }
        end_msg(&mut self.tx, at);
        self.stats.verdicts += 1;
    }

    /// Send the pending verdicts in one datagram.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.tx.is_empty() {
            return Ok(());
        }
        let tx = std::mem::take(&mut self.tx);
        let r = self.send(&tx);
        self.tx = tx;
        self.tx.clear();
        r
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let _ = self.flush();
        let _ = self.config(|b| push_attr(b, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_UNBIND, 0, 0, 0]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_message_round_trip() {
        // a packet message as the kernel builds it
        let mut b = Vec::new();
        let mut hdr = 7u32.to_be_bytes().to_vec();
        hdr.extend_from_slice(&0x0800u16.to_be_bytes());
        hdr.push(2);
        push_attr(&mut b, NFQA_PACKET_HDR, &hdr);
        push_attr(&mut b, NFQA_MARK, &5u32.to_be_bytes());
        push_attr(&mut b, NFQA_IFINDEX_INDEV, &3u32.to_be_bytes());
        push_attr(&mut b, NFQA_IFINDEX_OUTDEV, &4u32.to_be_bytes());
        push_attr(&mut b, NFQA_PAYLOAD, &[0x45, 0, 0, 20, 1]);
        let p = parse_packet(&b).expect("parsed");
        assert_eq!((p.id, p.hw_protocol, p.hook, p.mark), (7, 0x0800, 2, 5));
        assert_eq!((p.indev, p.outdev), (3, 4));
        assert_eq!(p.payload, &[0x45, 0, 0, 20, 1]);
        // no NFQA_SKB_INFO: the checksum was verified; with it, as its flags say
        assert!(p.checksum_trusted() && p.skb_info == 0);
        for (flags, trusted) in [
            (SKB_CSUM_NOTVERIFIED, false),
            (SKB_CSUMNOTREADY, true),
            (SKB_GSO | SKB_CSUM_NOTVERIFIED, false),
            (SKB_GSO, true),
        ] {
            let mut b2 = b.clone();
            push_attr(&mut b2, NFQA_SKB_INFO, &flags.to_be_bytes());
            let p = parse_packet(&b2).expect("parsed");
            assert_eq!((p.skb_info, p.checksum_trusted()), (flags, trusted));
        }
        // a local socket's owner, when the kernel sends it; none for a forwarded packet
        assert_eq!((p.uid, p.gid), (None, None));
        let mut b3 = b.clone();
        push_attr(&mut b3, NFQA_UID, &1000u32.to_be_bytes());
        push_attr(&mut b3, NFQA_GID, &100u32.to_be_bytes());
        let p = parse_packet(&b3).expect("parsed");
        assert_eq!((p.uid, p.gid), (Some(1000), Some(100)));
        // truncated attributes end the walk without a panic
        for cut in 0..b.len() {
            let _ = parse_packet(&b[..cut]);
        }
        assert!(parse_packet(&b[..3]).is_none());
    }

    #[test]
    fn verdicts_are_batched_in_one_buffer() {
        let mut tx = Vec::new();
        for id in 0..3u32 {
            let at = start_msg(&mut tx, NFQNL_MSG_VERDICT, 0, 0, 9);
            let mut vh = [0u8; 8];
            vh[..4].copy_from_slice(&1u32.to_be_bytes());
            vh[4..].copy_from_slice(&id.to_be_bytes());
            push_attr(&mut tx, NFQA_VERDICT_HDR, &vh);
            end_msg(&mut tx, at);
        }
        // three messages, each a 16-byte header, 4-byte nfgenmsg and a 12-byte attribute
        assert_eq!(tx.len(), 3 * 32);
        let mut m = &tx[..];
        let mut ids = Vec::new();
        while !m.is_empty() {
            let len = u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize;
            assert_eq!(len, 32);
            assert_eq!(u16::from_be_bytes([m[18], m[19]]), 9, "queue number");
            let (ty, d) = attrs(&m[20..len]).next().unwrap();
            assert_eq!(ty, NFQA_VERDICT_HDR);
            ids.push(be32(&d[4..]).unwrap());
            m = &m[len..];
        }
        assert_eq!(ids, vec![0, 1, 2]);
    }
}
