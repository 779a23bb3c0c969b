//! Timeouts per protocol and state, and the table's configuration (Linux's defaults).

use std::time::Duration;

use crate::TcpState;

/// Timeouts per protocol and state. `Default` is Linux's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub tcp_syn_sent: Duration,
    pub tcp_syn_recv: Duration,
    pub tcp_established: Duration,
    pub tcp_fin_wait: Duration,
    pub tcp_close_wait: Duration,
    pub tcp_last_ack: Duration,
    pub tcp_time_wait: Duration,
    pub tcp_close: Duration,
    pub tcp_syn_sent2: Duration,
    /// `nf_conntrack_tcp_timeout_max_retrans` (kept for configuration; see crate docs).
    pub tcp_retrans: Duration,
    /// Used instead of a longer state timeout while data is unacknowledged.
    pub tcp_unack: Duration,
    pub udp: Duration,
    pub udp_stream: Duration,
    pub icmp: Duration,
    pub generic: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = Duration::from_secs;
        Timeouts {
            tcp_syn_sent: s(120),
            tcp_syn_recv: s(60),
            tcp_established: s(432_000),
            tcp_fin_wait: s(120),
            tcp_close_wait: s(60),
            tcp_last_ack: s(30),
            tcp_time_wait: s(120),
            tcp_close: s(10),
            tcp_syn_sent2: s(120),
            tcp_retrans: s(300),
            tcp_unack: s(300),
            udp: s(30),
            udp_stream: s(120),
            icmp: s(30),
            generic: s(600),
        }
    }
}

impl Timeouts {
    /// The timeout of a TCP state (`None` state: SYN_SENT's).
    pub fn tcp(&self, s: TcpState) -> Duration {
        match s {
            TcpState::None | TcpState::SynSent => self.tcp_syn_sent,
            TcpState::SynRecv => self.tcp_syn_recv,
            TcpState::Established => self.tcp_established,
            TcpState::FinWait => self.tcp_fin_wait,
            TcpState::CloseWait => self.tcp_close_wait,
            TcpState::LastAck => self.tcp_last_ack,
            TcpState::TimeWait => self.tcp_time_wait,
            TcpState::Close => self.tcp_close,
            TcpState::SynSent2 => self.tcp_syn_sent2,
        }
    }

    /// Every timeout at most `max`.
    pub(crate) fn clamp(&mut self, max: Duration) {
        for d in [
            &mut self.tcp_syn_sent,
            &mut self.tcp_syn_recv,
            &mut self.tcp_established,
            &mut self.tcp_fin_wait,
            &mut self.tcp_close_wait,
            &mut self.tcp_last_ack,
            &mut self.tcp_time_wait,
            &mut self.tcp_close,
            &mut self.tcp_syn_sent2,
            &mut self.tcp_retrans,
            &mut self.tcp_unack,
            &mut self.udp,
            &mut self.udp_stream,
            &mut self.icmp,
            &mut self.generic,
        ] {
            *d = (*d).min(max);
        }
    }

    pub(crate) fn all(&self) -> [Duration; 15] {
        [
            self.tcp_syn_sent,
            self.tcp_syn_recv,
            self.tcp_established,
            self.tcp_fin_wait,
            self.tcp_close_wait,
            self.tcp_last_ack,
            self.tcp_time_wait,
            self.tcp_close,
            self.tcp_syn_sent2,
            self.tcp_retrans,
            self.tcp_unack,
            self.udp,
            self.udp_stream,
            self.icmp,
            self.generic,
        ]
    }
}

/// Table configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The most entries the table holds (`nf_conntrack_max`); at most 2^30.
    pub max_entries: usize,
    pub timeouts: Timeouts,
    /// Pick up TCP connections from a mid-stream ACK (`nf_conntrack_tcp_loose`, default on).
    pub tcp_loose: bool,
    /// Accept out-of-window TCP segments (`nf_conntrack_tcp_be_liberal`, default off); invalid
    /// RSTs are still invalid.
    pub tcp_be_liberal: bool,
    /// Seed of the hash (set it randomly to resist hash flooding).
    pub hash_seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_entries: 65536,
            timeouts: Timeouts::default(),
            tcp_loose: true,
            tcp_be_liberal: false,
            hash_seed: 0x2545_f491_4f6c_dd1d,
        }
    }
}
