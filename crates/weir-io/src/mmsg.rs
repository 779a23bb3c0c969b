//! `recvmmsg` into a set of buffers: the batched receive both backends share.

use std::io;

/// One received message: its length, and whether it was cut to the buffer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Got {
    pub len: usize,
    pub truncated: bool,
}

/// Receive up to `bufs.len()` messages on `fd` in one call (`flags`: `MSG_DONTWAIT`,
/// `MSG_WAITFORONE`, ...), filling `got`. Returns how many arrived, or the raw error.
pub(crate) fn recv(
    fd: i32,
    bufs: &mut [Vec<u8>],
    got: &mut [Got],
    flags: i32,
) -> io::Result<usize> {
    let k = bufs.len().min(got.len());
    let mut iov: Vec<libc::iovec> = bufs[..k]
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain old data; zeroed, then each points at its own iovec.
    let mut msgs: Vec<libc::mmsghdr> = (0..k).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `k` headers whose iovecs point into `bufs`, all alive for the call; the kernel
    // writes at most each buffer's length.
    let n = unsafe { libc::recvmmsg(fd, msgs.as_mut_ptr(), k as u32, flags, std::ptr::null_mut()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    for (g, m) in got.iter_mut().zip(&msgs[..n]) {
        *g = Got {
            len: m.msg_len as usize,
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        };
    }
    Ok(n)
}
