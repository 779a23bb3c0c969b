//! Unit tests of the layout: entry sizes, the cells of the TCP state table.

use super::*;

#[test]
fn entry_sizes() {
    assert_eq!(std::mem::size_of::<TcpConn>(), 48);
    assert!(std::mem::size_of::<Entry<()>>() <= 112);
    let ct: Conntrack<()> = Conntrack::new(Config {
        max_entries: 1 << 20,
        ..Config::default()
    });
    assert!(ct.bytes_per_entry() <= 128, "{}", ct.bytes_per_entry());
}

#[test]
fn tcp_table_rows() {
    // sanity: every cell is a state, IV or IG
    for d in tcp::TABLE {
        for row in d {
            for c in row {
                assert!(c <= 11);
            }
        }
    }
}
