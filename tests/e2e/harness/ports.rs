//! Addresses: a loopback address per test process and a block of free ports per
//! cluster, so that tests running in parallel never collide.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// Ports per cluster: a client and a peer port for each of up to 10 members (the
/// members a cluster starts with and those that join it later).
pub(super) const PORT_BLOCK: u32 = 20;

/// Picks a loopback address for this process and a block of `2 * members` ports on it
/// that are free right now. The address is unique per process id; the port block is
/// unique per cluster within the process.
/// The loopback address of this test process's clusters (unique per process id), for
/// certificates whose SANs must name it before the cluster exists.
pub fn loopback_ip() -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        (1 + (pid / (254 * 254)) % 254) as u8,
        (1 + (pid / 254) % 254) as u8,
        (1 + pid % 254) as u8,
    )
}

/// Member `i`'s two spare ports, counted down from the top of the cluster's port block
/// so that members that join later keep taking pairs from the bottom.
pub(super) fn spare_ports(base_port: u16, i: usize) -> [u16; 2] {
    let top = base_port + PORT_BLOCK as u16 - 1 - 2 * i as u16;
    [top, top - 1]
}

pub(super) fn allocate_addresses(members: usize) -> (Ipv4Addr, u16, String) {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    const BASE: u32 = 20_000;
    const BLOCK: u32 = PORT_BLOCK;
    // Ports 20000..32000: below Linux's default ephemeral range (32768..60999), so
    // client connections never hold a port a member will bind on restart.
    const BLOCKS: u32 = 600;
    assert!(
        (4 * members) as u32 <= BLOCK,
        "too many members for one port block"
    );
    let pid = std::process::id();
    let ip = loopback_ip();
    for _ in 0..BLOCKS {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = BASE + (n % BLOCKS) * BLOCK;
        // Each member's client and peer ports from the bottom, its spare ports (see
        // `spare_ports`) from the top.
        let free = (0..2 * members as u32)
            .chain((0..2 * members as u32).map(|i| BLOCK - 1 - i))
            .all(|k| TcpListener::bind(SocketAddrV4::new(ip, (base + k) as u16)).is_ok());
        if free {
            return (ip, base as u16, format!("qk-e2e-{pid}-{n}"));
        }
    }
    panic!("no free port block on {ip}");
}
