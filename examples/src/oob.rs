//! The out-of-band exchange of rdma-core's pingpong tools, byte for byte.
//!
//! Each side's address is the ASCII string `LID:QPN:PSN:GID` formatted as
//! `%04x:%06x:%06x:` followed by the 16 GID bytes as 32 lowercase hex
//! digits, sent as a fixed 52-byte buffer (51 characters and a NUL). Over
//! one TCP connection (default port 18515):
//!
//! 1. the client connects and sends its 52 bytes;
//! 2. the server reads them, moves its QP(s) to RTR/RTS (the `ready`
//!    callback), and sends its own 52 bytes;
//! 3. the client reads them and sends `"done"` with its NUL (5 bytes);
//! 4. the server reads the 5 bytes; both close.
//!
//! `srq_pingpong` sends one 52-byte message per QP in each direction.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Size of one address message (with its NUL).
pub const MSG_LEN: usize = 52;

/// One side's address as the pingpong tools exchange it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u32,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID (all zero when the tool was run without `-g`).
    pub gid: Ipv6Addr,
}

impl Dest {
    /// The 52-byte wire form.
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let s = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid & 0xffff,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.gid.octets().iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        let mut out = [0u8; MSG_LEN];
        let n = s.len().min(MSG_LEN - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parse a received message (up to its NUL). Like rdma-core's
    /// `sscanf("%x:%x:%x:%s")`, but strict: malformed input is an error.
    pub fn from_wire(msg: &[u8]) -> Result<Dest, String> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let s = std::str::from_utf8(&msg[..end]).map_err(|_| "address message is not ASCII")?;
        let mut it = s.splitn(4, ':');
        let mut hex = |what: &str| -> Result<u32, String> {
            let f = it.next().ok_or_else(|| format!("address message {s:?}: no {what}"))?;
            u32::from_str_radix(f, 16).map_err(|_| format!("address message {s:?}: bad {what}"))
        };
        let (lid, qpn, psn) = (hex("LID")?, hex("QPN")?, hex("PSN")?);
        let g = it.next().ok_or_else(|| format!("address message {s:?}: no GID"))?;
        if g.len() != 32 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("address message {s:?}: GID is not 32 hex digits"));
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| "bad GID")?;
        }
        Ok(Dest { lid, qpn, psn, gid: Ipv6Addr::from(gid) })
    }

    /// Whether the GID's interface id (its low 8 bytes) is non-zero: the
    /// tools then use a GRH (on RoCE: the address) to reach the peer.
    pub fn has_gid(&self) -> bool {
        self.gid.octets()[8..].iter().any(|&b| b != 0)
    }
}

/// Client side: send `mine` (one message per entry), read as many from the
/// server, send "done". Connection refusals are retried for `retry` (the
/// server may not be listening yet; rdma-core gives up at once).
/// Returns the server's addresses and its IP address.
pub fn client_exchange(
    server: &str,
    port: u16,
    mine: &[Dest],
    retry: Duration,
) -> Result<(Vec<Dest>, IpAddr), String> {
    let addrs: Vec<SocketAddr> =
        (server, port).to_socket_addrs().map_err(|e| format!("{e} for {server}:{port}"))?.collect();
    let deadline = Instant::now() + retry;
    let mut sock = loop {
        match addrs.iter().find_map(|a| TcpStream::connect(a).ok()) {
            Some(s) => break s,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            None => return Err(format!("Couldn't connect to {server}:{port}")),
        }
    };
    let peer = sock.peer_addr().map(|a| a.ip()).map_err(|e| e.to_string())?;
    for d in mine {
        sock.write_all(&d.to_wire()).map_err(|_| "Couldn't send local address".to_string())?;
    }
    let mut out = Vec::with_capacity(mine.len());
    for i in 0..mine.len() {
        let mut msg = [0u8; MSG_LEN];
        sock.read_exact(&mut msg).map_err(|e| {
            format!("client read/write: {e}\nCouldn't read/write remote address [{i}]")
        })?;
        out.push(Dest::from_wire(&msg)?);
    }
    sock.write_all(b"done\0")
        .map_err(|e| format!("client read/write: {e}\nCouldn't read/write remote address"))?;
    Ok((out, peer))
}

/// Server side: listen on `port` (all addresses), accept one client, read
/// `n` messages, call `ready` with them and the client's IP (connect the
/// QPs there) to get this side's addresses, send them, read "done".
pub fn server_exchange(
    port: u16,
    n: usize,
    ready: impl FnOnce(&[Dest], IpAddr) -> Result<Vec<Dest>, String>,
) -> Result<(Vec<Dest>, IpAddr), String> {
    let listener = TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|_| format!("Couldn't listen to port {port}"))?;
    let (mut conn, peer) = listener.accept().map_err(|_| "accept() failed".to_string())?;
    drop(listener);
    let peer_ip = match peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    let mut remote = Vec::with_capacity(n);
    for i in 0..n {
        let mut msg = [0u8; MSG_LEN];
        conn.read_exact(&mut msg).map_err(|e| {
            format!("server read: {e}\n0/{MSG_LEN}: Couldn't read remote address [{i}]")
        })?;
        remote.push(Dest::from_wire(&msg)?);
    }
    let mine =
        ready(&remote, peer_ip).map_err(|e| format!("{e}\nCouldn't connect to remote QP"))?;
    for d in &mine {
        conn.write_all(&d.to_wire()).map_err(|_| "Couldn't send/recv local address".to_string())?;
    }
    let mut done = [0u8; 5];
    conn.read_exact(&mut done).map_err(|_| "Couldn't send/recv local address".to_string())?;
    Ok((remote, peer_ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_is_rdma_cores() {
        let d =
            Dest { lid: 0, qpn: 0x11, psn: 0xcf61ee, gid: "::ffff:192.168.77.3".parse().unwrap() };
        let w = d.to_wire();
        assert_eq!(w.len(), 52);
        assert_eq!(&w[..51], b"0000:000011:cf61ee:00000000000000000000ffffc0a84d03");
        assert_eq!(w[51], 0);
        assert_eq!(Dest::from_wire(&w).unwrap(), d);
        assert!(d.has_gid());
        let z = Dest { gid: Ipv6Addr::UNSPECIFIED, ..d };
        assert!(!z.has_gid());
        for bad in [
            &b"zz"[..],
            b"0000:000011",
            b"0000:000011:cf61ee:00ff",
            b"0000:00001g:0:00000000000000000000ffffc0a84d03",
        ] {
            assert!(Dest::from_wire(bad).is_err());
        }
        assert!(Dest::from_wire(&[0xff; 52]).is_err());
    }

    #[test]
    fn exchange_over_loopback() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let a = Dest { lid: 0, qpn: 0x11, psn: 1, gid: "::ffff:127.0.0.3".parse().unwrap() };
        let b = Dest { lid: 0, qpn: 0x12, psn: 2, gid: "::ffff:127.0.0.2".parse().unwrap() };
        let srv = std::thread::spawn(move || {
            server_exchange(port, 1, |r, _| {
                assert_eq!(r, &[a]);
                Ok(vec![b])
            })
        });
        let (got, _) = client_exchange("127.0.0.1", port, &[a], Duration::from_secs(5)).unwrap();
        assert_eq!(got, vec![b]);
        let (r, peer) = srv.join().unwrap().unwrap();
        assert_eq!(r, vec![a]);
        assert!(peer.is_loopback());
    }
}
