//! The pure parts: which sockets become rsockets, the flags a socket type
//! carries, `select`'s fd sets as `poll` entries and back, timeouts.

use libc::{c_int, c_short, fd_set, pollfd};

/// What `socket(domain, ty, protocol)` asks for, if it is a TCP socket
/// (the kind that becomes an rsocket): `(cloexec, nonblock)` from the
/// flags in `ty`. UDP, unix and every other kind stay the kernel's.
pub fn tcp_socket(domain: c_int, ty: c_int, protocol: c_int) -> Option<(bool, bool)> {
    let flags = libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    let tcp = matches!(domain, libc::AF_INET | libc::AF_INET6)
        && ty & !flags == libc::SOCK_STREAM
        && (protocol == 0 || protocol == libc::IPPROTO_TCP);
    tcp.then_some((ty & libc::SOCK_CLOEXEC != 0, ty & libc::SOCK_NONBLOCK != 0))
}

/// `accept4`'s flags: `(cloexec, nonblock)`, or None (EINVAL) for others.
pub fn accept_flags(flags: c_int) -> Option<(bool, bool)> {
    let known = libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    (flags & !known == 0)
        .then_some((flags & libc::SOCK_CLOEXEC != 0, flags & libc::SOCK_NONBLOCK != 0))
}

/// `connect` errors after which the socket stays an rsocket (the call is
/// under way, or the caller's mistake): on any other the connection is
/// tried over kernel TCP, as rdma-core's preload does (it keeps only
/// `EINPROGRESS`).
pub fn connect_keeps_rsocket(errno: c_int) -> bool {
    matches!(
        errno,
        libc::EINPROGRESS
            | libc::EALREADY
            | libc::EISCONN
            | libc::EINTR
            | libc::EFAULT
            | libc::EBADF
    )
}

/// A `timeval` (NULL: forever) in poll's milliseconds, rounded up.
pub fn timeval_ms(t: Option<&libc::timeval>) -> c_int {
    match t {
        None => -1,
        Some(t) => ms(t.tv_sec, t.tv_usec * 1000),
    }
}

/// A `timespec` (NULL: forever) in poll's milliseconds, rounded up.
pub fn timespec_ms(t: Option<&libc::timespec>) -> c_int {
    match t {
        None => -1,
        Some(t) => ms(t.tv_sec, t.tv_nsec),
    }
}

fn ms(sec: i64, nsec: i64) -> c_int {
    let total = i128::from(sec.max(0)) * 1000 + (i128::from(nsec.max(0)) + 999_999) / 1_000_000;
    total.min(i128::from(c_int::MAX)) as c_int
}

/// `FD_ISSET` on an optional set.
fn isset(set: Option<&fd_set>, fd: c_int) -> bool {
    // SAFETY: `fd` is in 0..FD_SETSIZE (the callers' loops); FD_ISSET only
    // reads the set.
    set.is_some_and(|s| unsafe { libc::FD_ISSET(fd, s) })
}

/// `select`'s sets (fds below `nfds`) as poll entries: the program's fds
/// (`user`) and the entries to poll, each fd replaced by `map(fd)` (an
/// rsocket's number, or the fd itself).
pub fn sets_to_poll(
    nfds: c_int,
    rd: Option<&fd_set>,
    wr: Option<&fd_set>,
    ex: Option<&fd_set>,
    map: impl Fn(c_int) -> c_int,
) -> (Vec<c_int>, Vec<pollfd>) {
    let mut user = Vec::new();
    let mut fds = Vec::new();
    for fd in 0..nfds.clamp(0, libc::FD_SETSIZE as c_int) {
        let mut events: c_short = 0;
        if isset(rd, fd) {
            events |= libc::POLLIN;
        }
        if isset(wr, fd) {
            events |= libc::POLLOUT;
        }
        if isset(ex, fd) {
            events |= libc::POLLPRI;
        }
        if events != 0 {
            user.push(fd);
            fds.push(pollfd { fd: map(fd), events, revents: 0 });
        }
    }
    (user, fds)
}

/// Poll results back into `select`'s sets (cleared first): the count of
/// bits set, as `select` returns it. Readable: data, end of file, hang-up
/// or error; writable: room or error; exceptional: urgent data.
pub fn poll_to_sets(
    user: &[c_int],
    fds: &[pollfd],
    mut rd: Option<&mut fd_set>,
    mut wr: Option<&mut fd_set>,
    mut ex: Option<&mut fd_set>,
) -> c_int {
    for set in [rd.as_deref_mut(), wr.as_deref_mut(), ex.as_deref_mut()].into_iter().flatten() {
        // SAFETY: a valid set of the caller's.
        unsafe { libc::FD_ZERO(set) };
    }
    let mut count = 0;
    for (&fd, p) in user.iter().zip(fds) {
        let hit = |m: c_short| p.revents & m != 0;
        let mut put = |set: &mut Option<&mut fd_set>, want: c_short, m: c_short| {
            if let Some(s) = set.as_deref_mut() {
                if p.events & want != 0 && hit(m) {
                    // SAFETY: fd below FD_SETSIZE (from sets_to_poll).
                    unsafe { libc::FD_SET(fd, s) };
                    count += 1;
                }
            }
        };
        put(&mut rd, libc::POLLIN, libc::POLLIN | libc::POLLHUP | libc::POLLERR);
        put(&mut wr, libc::POLLOUT, libc::POLLOUT | libc::POLLERR);
        put(&mut ex, libc::POLLPRI, libc::POLLPRI);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> fd_set {
        // SAFETY: fd_set is plain bits; FD_ZERO makes it a valid empty set.
        unsafe {
            let mut s: fd_set = std::mem::zeroed();
            libc::FD_ZERO(&mut s);
            s
        }
    }

    fn set_of(fds: &[c_int]) -> fd_set {
        let mut s = empty();
        for &fd in fds {
            // SAFETY: small fds, a valid set.
            unsafe { libc::FD_SET(fd, &mut s) };
        }
        s
    }

    fn members(s: &fd_set) -> Vec<c_int> {
        // SAFETY: fds below FD_SETSIZE, a valid set.
        (0..libc::FD_SETSIZE as c_int).filter(|&fd| unsafe { libc::FD_ISSET(fd, s) }).collect()
    }

    #[test]
    fn tcp_sockets_and_their_flags() {
        use libc::*;
        assert_eq!(tcp_socket(AF_INET, SOCK_STREAM, 0), Some((false, false)));
        assert_eq!(tcp_socket(AF_INET6, SOCK_STREAM, IPPROTO_TCP), Some((false, false)));
        assert_eq!(tcp_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), Some((true, false)));
        assert_eq!(
            tcp_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 6),
            Some((true, true))
        );
        assert_eq!(tcp_socket(AF_INET, SOCK_DGRAM, 0), None);
        assert_eq!(tcp_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), None);
        assert_eq!(tcp_socket(AF_UNIX, SOCK_STREAM, 0), None);
        assert_eq!(tcp_socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP), None);
        assert_eq!(tcp_socket(AF_INET, SOCK_SEQPACKET, 0), None);
        assert_eq!(accept_flags(0), Some((false, false)));
        assert_eq!(accept_flags(SOCK_CLOEXEC), Some((true, false)));
        assert_eq!(accept_flags(SOCK_NONBLOCK | SOCK_CLOEXEC), Some((true, true)));
        assert_eq!(accept_flags(1), None);
        assert!(connect_keeps_rsocket(EINPROGRESS) && !connect_keeps_rsocket(ECONNREFUSED));
        assert!(!connect_keeps_rsocket(ENODEV) && !connect_keeps_rsocket(ETIMEDOUT));
    }

    #[test]
    fn timeouts_round_up_and_saturate() {
        let tv = |s, us| libc::timeval { tv_sec: s, tv_usec: us };
        let ts = |s, ns| libc::timespec { tv_sec: s, tv_nsec: ns };
        assert_eq!(timeval_ms(None), -1);
        assert_eq!(timeval_ms(Some(&tv(0, 0))), 0);
        assert_eq!(timeval_ms(Some(&tv(0, 1))), 1);
        assert_eq!(timeval_ms(Some(&tv(2, 500_000))), 2500);
        assert_eq!(timeval_ms(Some(&tv(i64::MAX, 0))), c_int::MAX);
        assert_eq!(timespec_ms(Some(&ts(1, 1))), 1001);
        assert_eq!(timespec_ms(Some(&ts(-1, 0))), 0);
        assert_eq!(timespec_ms(None), -1);
    }

    /// stdin and an rsocket (fd 5, rsocket 40) in the read set, fd 5 in
    /// the write set too: 0 and 40 polled; back in the sets under the
    /// program's numbers.
    #[test]
    fn select_sets_through_poll_and_back() {
        let (rd, wr) = (set_of(&[0, 5]), set_of(&[5]));
        let map = |fd| if fd == 5 { 40 } else { fd };
        let (user, mut fds) = sets_to_poll(6, Some(&rd), Some(&wr), None, map);
        assert_eq!(user, vec![0, 5]);
        assert_eq!((fds[0].fd, fds[0].events), (0, libc::POLLIN));
        assert_eq!((fds[1].fd, fds[1].events), (40, libc::POLLIN | libc::POLLOUT));
        // nothing ready
        let (mut r2, mut w2) = (rd, wr);
        assert_eq!(poll_to_sets(&user, &fds, Some(&mut r2), Some(&mut w2), None), 0);
        assert!(members(&r2).is_empty() && members(&w2).is_empty());
        // the rsocket writable and hung up, stdin quiet
        fds[1].revents = libc::POLLOUT | libc::POLLHUP;
        let (mut r2, mut w2, mut e2) = (rd, wr, set_of(&[3]));
        let n = poll_to_sets(&user, &fds, Some(&mut r2), Some(&mut w2), Some(&mut e2));
        assert_eq!(n, 2);
        assert_eq!((members(&r2), members(&w2), members(&e2)), (vec![5], vec![5], vec![]));
        // nfds bounds the scan; a set not given is not touched
        let (user, _) = sets_to_poll(5, Some(&rd), Some(&wr), None, map);
        assert_eq!(user, vec![0]);
        let (user, _) = sets_to_poll(-1, Some(&rd), None, None, map);
        assert!(user.is_empty());
    }
}
