//! pcap I/O (in progress)
