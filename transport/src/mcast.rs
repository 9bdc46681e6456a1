//! IP multicast for a UDP device: the groups its QPs are attached to.
//!
//! A RoCEv2 multicast datagram goes to the group's IP address, port 4791.
//! Linux hands a copy of it to every socket bound to that address and port
//! whose group membership covers it, whoever owns the socket, so each
//! device (each member process of a shared device) that joins a group
//! opens a socket of its own for it: bound to `GROUP:4791` with
//! `SO_REUSEADDR` and `SO_REUSEPORT` (the other members bind it too), a
//! member of the group on the device's interface (`IP_ADD_MEMBERSHIP` with
//! the device's address; IPv6: `IPV6_ADD_MEMBERSHIP` with the interface
//! that has it). The device's main socket sends to groups on its own
//! interface (`IP_MULTICAST_IF`, set at bind), with loopback on, so
//! devices on the same host, the sender's included, receive it, as
//! members of a group behind a switch do.
//!
//! The group sockets sit in one epoll set whose descriptor the engine
//! sleeps on beside the main socket ([`crate::Link::group_fd`]).

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::socket::{self as nsock, sockopt};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// The groups of one device.
#[derive(Default)]
pub(crate) struct Groups {
    pub(crate) socks: Vec<(IpAddr, UdpSocket)>,
    epoll: Option<Epoll>,
}

/// The interface index that has `ip` (0 if none does: the kernel then
/// picks by route).
pub(crate) fn ifindex_of(ip: IpAddr) -> u32 {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else { return 0 };
    for a in addrs {
        let has = a.address.as_ref().is_some_and(|s| {
            s.as_sockaddr_in().map(|v| IpAddr::V4(v.ip())) == Some(ip)
                || s.as_sockaddr_in6().map(|v| IpAddr::V6(v.ip())) == Some(ip)
        });
        if has {
            return nix::net::if_::if_nametoindex(a.interface_name.as_str()).unwrap_or(0);
        }
    }
    // 127.0.0.0/8 is all loopback, assigned or not
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => nix::net::if_::if_nametoindex("lo").unwrap_or(0),
        _ => 0,
    }
}

/// Send multicast from `sock` (bound to `local`) on `local`'s interface,
/// looped back to the host's members. Best effort: a socket that cannot
/// only fails its multicast sends.
pub fn set_sender(sock: &UdpSocket, local: IpAddr) {
    let fd = sock.as_fd();
    let _ = match local {
        IpAddr::V4(v4) => rustix::net::sockopt::set_ip_multicast_if(fd, &v4)
            .and_then(|_| rustix::net::sockopt::set_ip_multicast_loop(fd, true)),
        IpAddr::V6(_) => rustix::net::sockopt::set_ipv6_multicast_if(fd, ifindex_of(local))
            .and_then(|_| rustix::net::sockopt::set_ipv6_multicast_loop(fd, true)),
    };
}

impl Groups {
    /// Whether `group` is joined.
    pub fn has(&self, group: IpAddr) -> bool {
        self.socks.iter().any(|(g, _)| *g == group)
    }

    /// Join `group` for the device at `local` (a socket bound to
    /// `group:port`); joining a joined group is a no-op.
    pub fn join(&mut self, group: IpAddr, local: IpAddr, port: u16) -> io::Result<()> {
        if self.has(group) {
            return Ok(());
        }
        if !group.is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{group} is not a multicast address"),
            ));
        }
        let family = match group {
            IpAddr::V4(_) => nsock::AddressFamily::Inet,
            IpAddr::V6(_) => nsock::AddressFamily::Inet6,
        };
        let fd = nsock::socket(
            family,
            nsock::SockType::Datagram,
            nsock::SockFlag::SOCK_CLOEXEC | nsock::SockFlag::SOCK_NONBLOCK,
            None,
        )?;
        nsock::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
        nsock::setsockopt(&fd, sockopt::ReusePort, &true)?;
        match (group, local) {
            (IpAddr::V4(g), IpAddr::V4(l)) => {
                rustix::net::sockopt::set_ip_add_membership(&fd, &g, &l)?
            }
            (IpAddr::V6(g), l) => {
                rustix::net::sockopt::set_ipv6_add_membership(&fd, &g, ifindex_of(l))?
            }
            (IpAddr::V4(g), IpAddr::V6(_)) => {
                rustix::net::sockopt::set_ip_add_membership(&fd, &g, &Ipv4Addr::UNSPECIFIED)?
            }
        }
        // bound only once a member: a socket that shows in /proc/net/udp
        // receives the group's datagrams
        nsock::bind(fd.as_raw_fd(), &nsock::SockaddrStorage::from(SocketAddr::new(group, port)))?;
        let sock = UdpSocket::from(fd);
        if self.epoll.is_none() {
            self.epoll = Some(Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?);
        }
        if let Some(ep) = &self.epoll {
            let ev = EpollEvent::new(EpollFlags::EPOLLIN, sock.as_raw_fd() as u64);
            ep.add(sock.as_fd(), ev)?;
        }
        self.socks.push((group, sock));
        Ok(())
    }

    /// Leave `group` (close its socket: the kernel drops the membership).
    pub fn leave(&mut self, group: IpAddr) -> io::Result<()> {
        let at = self.socks.iter().position(|(g, _)| *g == group).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{group} is not joined"))
        })?;
        let (_, sock) = self.socks.remove(at);
        if let Some(ep) = &self.epoll {
            let _ = ep.delete(sock.as_fd());
        }
        Ok(())
    }

    /// The epoll set of the group sockets (`None` before the first join).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.epoll.as_ref().map(|e| e.0.as_fd())
    }
}
