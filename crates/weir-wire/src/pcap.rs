//! Reading and writing capture files: pcap and pcapng in, pcap out.
//!
//! [`read_file`] (or [`read`] from any reader) loads a whole capture into a [`Capture`]: the
//! link type and every packet with its timestamp. The format is recognised from the magic
//! number. A capture that ends in the middle of a record keeps the packets before it and
//! reports the problem in [`Capture::trailing_error`]; a file that is not a capture, or whose
//! link type weir cannot parse, is an [`Error`].
//!
//! [`Reader`] is the streaming form: an iterator of `Result<Packet, Error>` that holds one
//! packet at a time.
//!
//! [`PcapWriter`] writes classic pcap with nanosecond timestamps to any `Write`.
//!
//! Link types accepted: `LINKTYPE_ETHERNET` (1) as [`LinkType::Ethernet`]; `LINKTYPE_RAW`
//! (101, and the old 12/14 values some writers used), `LINKTYPE_IPV4` (228) and
//! `LINKTYPE_IPV6` (229) as [`LinkType::RawIp`].
//!
//! The pcapng side is parsed by the `pcap-file` crate; classic pcap records are read here so
//! that snapped captures (`orig_len > snaplen`) and truncated files are handled gracefully.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use pcap_file::pcap::PcapHeader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::PcapError;

use crate::meta::LinkType;

/// `LINKTYPE_ETHERNET`.
pub const DLT_EN10MB: u32 = 1;
/// `LINKTYPE_RAW`.
pub const DLT_RAW: u32 = 101;
/// `LINKTYPE_IPV4`.
pub const DLT_IPV4: u32 = 228;
/// `LINKTYPE_IPV6`.
pub const DLT_IPV6: u32 = 229;

/// Largest record accepted (a corrupt length field must not make us allocate gigabytes).
pub const MAX_RECORD: u32 = 16 << 20;

/// The weir link type for a capture link type, if weir handles it.
pub fn link_from_dlt(dlt: u32) -> Option<LinkType> {
    match dlt {
        DLT_EN10MB => Some(LinkType::Ethernet),
        DLT_RAW | 12 | 14 | DLT_IPV4 | DLT_IPV6 => Some(LinkType::RawIp),
        _ => None,
    }
}

/// The capture link type written for a weir link type (1 or 101).
pub fn dlt_of(link: LinkType) -> u32 {
    match link {
        LinkType::Ethernet => DLT_EN10MB,
        LinkType::RawIp => DLT_RAW,
    }
}

fn dlt_name(dlt: u32) -> &'static str {
    match dlt {
        0 => "NULL (BSD loopback)",
        9 => "PPP",
        105 => "IEEE802_11",
        113 => "LINUX_SLL (Linux cooked capture)",
        127 => "IEEE802_11_RADIOTAP",
        189 => "USB_LINUX",
        220 => "USB_LINUX_MMAPPED",
        276 => "LINUX_SLL2 (Linux cooked capture v2)",
        _ => "unknown",
    }
}

/// One captured packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_nanos: u64,
    /// The captured bytes (possibly fewer than `orig_len`).
    pub data: Vec<u8>,
    /// Length of the packet on the wire.
    pub orig_len: u32,
    pub link: LinkType,
}

/// Which file format a capture was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Pcap,
    PcapNg,
}

/// A whole capture in memory.
#[derive(Debug)]
pub struct Capture {
    pub format: Format,
    /// The link type of the capture (pcapng: of the first interface; each [`Packet`] carries
    /// its own).
    pub link: LinkType,
    pub packets: Vec<Packet>,
    /// Set when the file ended in the middle of a record or a later record was corrupt: the
    /// packets before it are in `packets`.
    pub trailing_error: Option<Error>,
}

/// Why a capture could not be read or written.
#[derive(Debug)]
pub enum Error {
    Io(io::Error),
    /// The file does not start with a pcap or pcapng magic number.
    NotACapture {
        magic: u32,
    },
    /// The link type is not one weir parses.
    UnsupportedLinkType {
        dlt: u32,
        name: &'static str,
    },
    /// The file ends inside a record (after `packets` complete packets).
    Truncated {
        packets: usize,
    },
    /// A record is invalid (after `packets` complete packets).
    Corrupt {
        packets: usize,
        what: String,
    },
    /// A packet's interface id names no interface description (pcapng).
    UnknownInterface {
        packets: usize,
        id: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "capture i/o error: {e}"),
            Error::NotACapture { magic } => {
                write!(f, "not a pcap or pcapng file (magic number {magic:#010x})")
            }
            Error::UnsupportedLinkType { dlt, name } => write!(
                f,
                "unsupported link type {dlt} ({name}): weir reads Ethernet (1) and raw IP (101, 228, 229)"
            ),
            Error::Truncated { packets } => {
                write!(f, "capture truncated: the file ends inside the record after packet {packets}")
            }
            Error::Corrupt { packets, what } => {
                write!(f, "corrupt capture after packet {packets}: {what}")
            }
            Error::UnknownInterface { packets, id } => write!(
                f,
                "corrupt pcapng after packet {packets}: packet names interface {id}, which was not described"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

fn unsupported(dlt: u32) -> Error {
    Error::UnsupportedLinkType {
        dlt,
        name: dlt_name(dlt),
    }
}

/// Read a whole capture file (pcap or pcapng).
pub fn read_file(path: impl AsRef<Path>) -> Result<Capture, Error> {
    read(BufReader::new(File::open(path)?))
}

/// Read a whole capture from a reader.
pub fn read<R: Read>(reader: R) -> Result<Capture, Error> {
    let mut r = Reader::new(reader)?;
    let mut packets = Vec::new();
    let mut trailing_error = None;
    for p in &mut r {
        match p {
            Ok(p) => packets.push(p),
            Err(e) => {
                trailing_error = Some(e);
                break;
            }
        }
    }
    let link = r.link().or(packets.first().map(|p| p.link));
    let link = match link {
        Some(l) => l,
        None => match r.first_dlt {
            Some(dlt) => return Err(unsupported(dlt)),
            None => LinkType::Ethernet, // a pcapng without interfaces: empty
        },
    };
    Ok(Capture {
        format: r.format(),
        link,
        packets,
        trailing_error,
    })
}

/// Read a capture held in memory.
pub fn read_bytes(bytes: &[u8]) -> Result<Capture, Error> {
    read(bytes)
}

struct NgIface {
    link: Result<LinkType, u32>,
    /// Nanoseconds per timestamp unit as numerator / denominator.
    mul: u64,
    div: u64,
    offset_s: u64,
}

enum Inner<R: Read> {
    Pcap {
        r: R,
        le: bool,
        nanos: bool,
        link: Result<LinkType, u32>,
    },
    Ng {
        r: Box<PcapNgReader<Prefixed<R>>>,
        ifaces: Vec<NgIface>,
    },
}

/// A reader that first yields bytes already consumed (the magic number).
struct Prefixed<R> {
    head: [u8; 4],
    pos: usize,
    r: R,
}

impl<R: Read> Read for Prefixed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < 4 {
            let n = (4 - self.pos).min(buf.len());
            buf[..n].copy_from_slice(&self.head[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        self.r.read(buf)
    }
}

/// Streaming capture reader: yields packets one at a time. After the first error it yields
/// nothing more.
pub struct Reader<R: Read> {
    inner: Inner<R>,
    count: usize,
    done: bool,
    /// The first link type seen (pcap: the file's; pcapng: the first interface's).
    first_dlt: Option<u32>,
}

/// Read exactly `buf.len()` bytes; Ok(false) on a clean end before the first byte, Err
/// Truncated on an end in the middle.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8], packets: usize) -> Result<bool, Error> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => {
                return if got == 0 {
                    Ok(false)
                } else {
                    Err(Error::Truncated { packets })
                }
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::Io(e)),
        }
    }
    Ok(true)
}

fn ng_error(e: PcapError, packets: usize) -> Error {
    match e {
        PcapError::IncompleteBuffer => Error::Truncated { packets },
        PcapError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            Error::Truncated { packets }
        }
        PcapError::IoError(e) => Error::Io(e),
        PcapError::InvalidInterfaceId(id) => Error::UnknownInterface { packets, id },
        other => Error::Corrupt {
            packets,
            what: other.to_string(),
        },
    }
}

impl<R: Read> Reader<R> {
    /// Start reading: checks the magic number and the file header.
    pub fn new(mut reader: R) -> Result<Reader<R>, Error> {
        let mut magic = [0u8; 4];
        if !read_full(&mut reader, &mut magic, 0)? {
            return Err(Error::Truncated { packets: 0 });
        }
        let m = u32::from_be_bytes(magic);
        match m {
            0xa1b2c3d4 | 0xa1b23c4d | 0xd4c3b2a1 | 0x4d3cb2a1 => {
                let mut hdr = [0u8; 24];
                hdr[..4].copy_from_slice(&magic);
                if !read_full(&mut reader, &mut hdr[4..], 0)? {
                    return Err(Error::Truncated { packets: 0 });
                }
                let (_, h) = PcapHeader::from_slice(&hdr).map_err(|e| ng_error(e, 0))?;
                // The low 16 bits are the link type; the high bits may carry FCS information.
                let dlt = u32::from(h.datalink) & 0xffff;
                let link = link_from_dlt(dlt).ok_or(dlt);
                if let Err(dlt) = link {
                    return Err(unsupported(dlt));
                }
                Ok(Reader {
                    inner: Inner::Pcap {
                        r: reader,
                        le: h.endianness == pcap_file::Endianness::Little,
                        nanos: h.ts_resolution == pcap_file::TsResolution::NanoSecond,
                        link,
                    },
                    count: 0,
                    done: false,
                    first_dlt: Some(dlt),
                })
            }
            0x0a0d0d0a => {
                let pre = Prefixed {
                    head: magic,
                    pos: 0,
                    r: reader,
                };
                let r = PcapNgReader::new(pre).map_err(|e| ng_error(e, 0))?;
                Ok(Reader {
                    inner: Inner::Ng {
                        r: Box::new(r),
                        ifaces: Vec::new(),
                    },
                    count: 0,
                    done: false,
                    first_dlt: None,
                })
            }
            _ => Err(Error::NotACapture { magic: m }),
        }
    }

    /// The file format.
    pub fn format(&self) -> Format {
        match self.inner {
            Inner::Pcap { .. } => Format::Pcap,
            Inner::Ng { .. } => Format::PcapNg,
        }
    }

    /// The link type (pcap: the file's; pcapng: the first interface's, once described).
    pub fn link(&self) -> Option<LinkType> {
        self.first_dlt.and_then(link_from_dlt)
    }

    /// Packets yielded so far.
    pub fn packets_read(&self) -> usize {
        self.count
    }

    fn next_pcap(&mut self) -> Result<Option<Packet>, Error> {
        let count = self.count;
        let Inner::Pcap { r, le, nanos, link } = &mut self.inner else {
            unreachable!()
        };
        let mut h = [0u8; 16];
        if !read_full(r, &mut h, count)? {
            return Ok(None);
        }
        let word = |i: usize| {
            let b = [h[i], h[i + 1], h[i + 2], h[i + 3]];
            if *le {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            }
        };
        let (sec, frac, incl, orig) = (word(0), word(4), word(8), word(12));
        if incl > MAX_RECORD {
            return Err(Error::Corrupt {
                packets: count,
                what: format!("record length {incl} is larger than {MAX_RECORD}"),
            });
        }
        let per_sec = if *nanos { 1_000_000_000 } else { 1_000_000 };
        if frac >= per_sec {
            return Err(Error::Corrupt {
                packets: count,
                what: format!("timestamp fraction {frac} out of range"),
            });
        }
        let mut data = vec![0u8; incl as usize];
        if !read_full(r, &mut data, count)? && incl > 0 {
            return Err(Error::Truncated { packets: count });
        }
        let ts_nanos = sec as u64 * 1_000_000_000 + frac as u64 * (1_000_000_000 / per_sec as u64);
        let link = (*link).map_err(unsupported)?;
        Ok(Some(Packet {
            ts_nanos,
            data,
            orig_len: orig.max(incl),
            link,
        }))
    }

    fn next_ng(&mut self) -> Result<Option<Packet>, Error> {
        let count = self.count;
        loop {
            let Inner::Ng { r, ifaces } = &mut self.inner else {
                unreachable!()
            };
            let block = match r.next_block() {
                None => return Ok(None),
                Some(Err(e)) => return Err(ng_error(e, count)),
                Some(Ok(b)) => b,
            };
            let (iface, raw_ts, data, orig) = match block {
                Block::SectionHeader(_) => {
                    ifaces.clear();
                    continue;
                }
                Block::InterfaceDescription(idb) => {
                    let dlt = u32::from(idb.linktype);
                    let mut i = NgIface {
                        link: link_from_dlt(dlt).ok_or(dlt),
                        mul: 1000,
                        div: 1,
                        offset_s: 0,
                    };
                    for o in &idb.options {
                        match o {
                            InterfaceDescriptionOption::IfTsResol(res) => {
                                let (mul, div) = ts_scale(*res);
                                i.mul = mul;
                                i.div = div;
                            }
                            InterfaceDescriptionOption::IfTsOffset(s) => i.offset_s = *s,
                            _ => {}
                        }
                    }
                    ifaces.push(i);
                    if self.first_dlt.is_none() {
                        self.first_dlt = Some(dlt);
                    }
                    continue;
                }
                Block::EnhancedPacket(epb) => (
                    epb.interface_id,
                    epb.timestamp.as_nanos() as u64, // pcap-file stores raw units here
                    epb.data.into_owned(),
                    epb.original_len,
                ),
                Block::SimplePacket(spb) => {
                    // The block's data includes its padding: keep the original length at most.
                    let mut d = spb.data.into_owned();
                    d.truncate(spb.original_len as usize);
                    (0, 0, d, spb.original_len)
                }
                Block::Packet(pb) => (
                    pb.interface_id as u32,
                    pb.timestamp,
                    pb.data.into_owned(),
                    pb.original_len,
                ),
                _ => continue,
            };
            let Some(i) = ifaces.get(iface as usize) else {
                return Err(Error::UnknownInterface {
                    packets: count,
                    id: iface,
                });
            };
            let link = i.link.map_err(unsupported)?;
            let ts = (raw_ts as u128 * i.mul as u128 / i.div as u128) as u64;
            let ts_nanos = ts.saturating_add(i.offset_s.saturating_mul(1_000_000_000));
            return Ok(Some(Packet {
                ts_nanos,
                orig_len: orig.max(data.len() as u32),
                data,
                link,
            }));
        }
    }
}

/// Nanoseconds per pcapng timestamp unit for an `if_tsresol` value, as (mul, div).
fn ts_scale(res: u8) -> (u64, u64) {
    let n = (res & 0x7f) as u32;
    if res & 0x80 == 0 {
        // 10^-n seconds.
        if n <= 9 {
            (10u64.pow(9 - n), 1)
        } else {
            (1, 10u64.pow((n - 9).min(19)))
        }
    } else {
        // 2^-n seconds.
        (1_000_000_000, 1u64 << n.min(63))
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Packet, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = match self.inner {
            Inner::Pcap { .. } => self.next_pcap(),
            Inner::Ng { .. } => self.next_ng(),
        };
        match r {
            Ok(Some(p)) => {
                self.count += 1;
                Some(Ok(p))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Writes classic pcap (nanosecond timestamps, snaplen 262144) to any `Write`.
pub struct PcapWriter<W: Write> {
    w: W,
    link: LinkType,
}

impl<W: Write> PcapWriter<W> {
    /// Write the file header for `link` (DLT 1 or 101).
    pub fn new(w: W, link: LinkType) -> Result<PcapWriter<W>, Error> {
        Self::with_dlt(w, link, dlt_of(link))
    }

    /// Write the file header with an explicit link type value (e.g. 228 to keep
    /// `LINKTYPE_IPV4` from the input).
    pub fn with_dlt(mut w: W, link: LinkType, dlt: u32) -> Result<PcapWriter<W>, Error> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b23c4du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&262_144u32.to_le_bytes());
        h.extend_from_slice(&dlt.to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter { w, link })
    }

    /// The link type the file was opened with.
    pub fn link(&self) -> LinkType {
        self.link
    }

    /// Append one packet (the wire length is taken to be the data length).
    pub fn write(&mut self, ts_nanos: u64, data: &[u8]) -> Result<(), Error> {
        self.write_with_orig_len(ts_nanos, data, data.len() as u32)
    }

    /// Append one packet with its wire length.
    pub fn write_with_orig_len(
        &mut self,
        ts_nanos: u64,
        data: &[u8],
        orig_len: u32,
    ) -> Result<(), Error> {
        let incl = u32::try_from(data.len())
            .ok()
            .filter(|&l| l <= MAX_RECORD)
            .ok_or_else(|| Error::Corrupt {
                packets: 0,
                what: format!("packet of {} bytes is too large to write", data.len()),
            })?;
        let sec = u32::try_from(ts_nanos / 1_000_000_000).unwrap_or(u32::MAX);
        let frac = (ts_nanos % 1_000_000_000) as u32;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&sec.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&incl.to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.max(incl).to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(data)?;
        Ok(())
    }

    /// Append a [`Packet`] (its timestamp, data and wire length).
    pub fn write_packet(&mut self, p: &Packet) -> Result<(), Error> {
        self.write_with_orig_len(p.ts_nanos, &p.data, p.orig_len)
    }

    pub fn flush(&mut self) -> Result<(), Error> {
        self.w.flush()?;
        Ok(())
    }

    /// Flush and return the underlying writer.
    pub fn into_inner(mut self) -> Result<W, Error> {
        self.w.flush()?;
        Ok(self.w)
    }
}
