//! Telling systemd how weir is doing (`Type=notify`): ready once every queue or port is
//! open and the kernel rules are in place, reloading during a reload, stopping at the end.
//! Outside systemd (no `NOTIFY_SOCKET`) these do nothing.

use sd_notify::NotifyState;

fn notify(state: &[NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, state) {
        tracing::warn!(error = %e, "could not notify systemd");
    }
}

/// The dataplane is up (and after a reload, up again).
pub fn ready() {
    notify(&[NotifyState::Ready, NotifyState::Status("forwarding")]);
}

/// A reload is under way.
pub fn reloading() {
    notify(&[NotifyState::Reloading]);
}

/// Weir is stopping.
pub fn stopping() {
    notify(&[NotifyState::Stopping]);
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixDatagram;

    /// Readiness reaches the socket systemd names (a fake one here).
    #[test]
    fn readiness_reaches_notify_socket() {
        let dir = std::env::temp_dir().join(format!("weir-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        // SAFETY: the test sets the variable before any thread of its own reads it.
        unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };
        super::ready();
        let mut buf = [0u8; 256];
        let n = sock.recv(&mut buf).unwrap();
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        super::stopping();
        let n = sock.recv(&mut buf).unwrap();
        let stop = String::from_utf8_lossy(&buf[..n]).into_owned();
        // SAFETY: as above.
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        let _ = std::fs::remove_dir_all(&dir);
        assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
        assert!(stop.lines().any(|l| l == "STOPPING=1"), "{stop}");
    }
}
