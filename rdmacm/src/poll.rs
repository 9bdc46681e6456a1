//! `rpoll` and `rselect` over rsockets and ordinary fds together
//! (rsocket.c's `rs_poll_check`, `rs_poll_arm`): an rsocket's readiness
//! comes from its state; to sleep, each rsocket contributes its CM
//! channel and its armed completion channel, real fds, to one `poll(2)`.

use crate::guard;
use crate::rs::{Rs, State};
use crate::table::{self, lock};
use libc::{c_int, c_short, pollfd};
use std::time::{Duration, Instant};

/// What `poll` would say for this rsocket (`rs_poll_rs`).
fn revents(g: &mut Rs, events: c_short) -> c_short {
    let _ = g.progress();
    let mut r: c_short = 0;
    match g.state {
        State::Listening if !g.accept_q.is_empty() => r |= libc::POLLIN,
        State::ConnectError(_) => r |= libc::POLLOUT | libc::POLLERR,
        State::Connected => {
            if let Some(s) = g.stream.as_ref() {
                let p = s.poll();
                if p.pollin {
                    r |= libc::POLLIN;
                }
                if p.pollout && s.can_send() {
                    r |= libc::POLLOUT;
                }
                // hung up once nothing is left to read (rdma-core says so
                // as soon as the peer's DISCONNECT arrives, before the
                // data ahead of it is read; TCP, and rstream's poll loop,
                // expect the data first)
                let drained = s.readable_bytes() == 0;
                if (p.pollhup || g.cm_gone) && drained {
                    r |= libc::POLLHUP;
                }
                if p.pollerr {
                    r |= libc::POLLERR;
                }
            }
            if g.cm_gone {
                r |= libc::POLLIN;
            }
        }
        _ => {}
    }
    r & (events | libc::POLLHUP | libc::POLLERR)
}

/// One pass: each entry's revents; the number ready.
fn check(fds: &mut [pollfd]) -> c_int {
    let mut ready = 0;
    for p in fds.iter_mut() {
        if let Some(h) = crate::ds::lookup(p.fd) {
            p.revents = crate::ds_calls::revents(&h, p.events);
            if p.revents != 0 {
                ready += 1;
            }
            continue;
        }
        p.revents = match table::lookup(p.fd) {
            Ok(h) => revents(&mut lock(&h), p.events),
            Err(_) if p.fd < 0 => 0,
            Err(_) => {
                let mut one = pollfd { fd: p.fd, events: p.events, revents: 0 };
                // SAFETY: one pollfd, no wait.
                unsafe { libc::poll(&mut one, 1, 0) };
                one.revents
            }
        };
        if p.revents != 0 {
            ready += 1;
        }
    }
    ready
}

/// Sleep until any entry may be ready (at most `ms`).
fn sleep(fds: &[pollfd], ms: c_int) {
    let mut set = Vec::with_capacity(fds.len() * 2);
    for p in fds {
        if let Some(h) = crate::ds::lookup(p.fd) {
            match crate::ds_calls::poll_fds(&h) {
                None => return, // news already: look again
                Some(v) => set.extend(v.into_iter().map(|fd| pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })),
            }
            continue;
        }
        match table::lookup(p.fd) {
            Ok(h) => {
                let mut g = lock(&h);
                let (cm, cc) = g.arm();
                if g.progress().unwrap_or(true) {
                    return; // news already: look again
                }
                set.push(pollfd { fd: cm, events: libc::POLLIN, revents: 0 });
                if let Some(cc) = cc {
                    set.push(pollfd { fd: cc, events: libc::POLLIN, revents: 0 });
                }
            }
            Err(_) => set.push(pollfd { fd: p.fd, events: p.events, revents: 0 }),
        }
    }
    let ms = ms.clamp(0, crate::SLEEP_CAP_MS);
    // SAFETY: our array of pollfds.
    unsafe { libc::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, ms) };
}

#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    guard(|| {
        if fds.is_null() && n > 0 {
            return Err(libc::EFAULT);
        }
        let fds: &mut [pollfd] = if n == 0 {
            &mut []
        } else {
            // SAFETY: the caller's array of `n` pollfds.
            unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
        };
        let end = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        loop {
            let ready = check(fds);
            if ready > 0 {
                return Ok(ready);
            }
            let left = match end {
                None => crate::SLEEP_CAP_MS,
                Some(e) => {
                    let now = Instant::now();
                    if now >= e {
                        return Ok(0);
                    }
                    (e - now).as_millis().min(i32::MAX as u128) as c_int
                }
            };
            sleep(fds, left.max(1));
        }
    })
}

/// `FD_ISSET` and friends on the caller's set.
fn fd_isset(set: *mut libc::fd_set, fd: c_int) -> bool {
    // SAFETY: the caller's set (checked not NULL), fd below FD_SETSIZE.
    !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
}

#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    guard(|| {
        if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
            return Err(libc::EINVAL);
        }
        let mut pfds = Vec::new();
        for fd in 0..nfds {
            let mut ev = 0;
            if fd_isset(rd, fd) {
                ev |= libc::POLLIN;
            }
            if fd_isset(wr, fd) {
                ev |= libc::POLLOUT;
            }
            if fd_isset(ex, fd) {
                ev |= libc::POLLPRI;
            }
            if ev != 0 {
                pfds.push(pollfd { fd, events: ev, revents: 0 });
            }
        }
        // SAFETY: the caller's timeval or NULL.
        let timeout = match unsafe { t.as_ref() } {
            None => -1,
            Some(tv) => (tv.tv_sec.saturating_mul(1000) + tv.tv_usec / 1000)
                .clamp(0, i32::MAX as i64) as c_int,
        };
        // SAFETY: our own array.
        let r = unsafe { rpoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
        if r < 0 {
            return Err(crate::errno());
        }
        // SAFETY: the caller's sets, cleared then filled.
        unsafe {
            for set in [rd, wr, ex] {
                if !set.is_null() {
                    libc::FD_ZERO(set);
                }
            }
            let mut count = 0;
            for p in &pfds {
                let hit = |m: c_short| p.revents & m != 0;
                if !rd.is_null()
                    && hit(libc::POLLIN | libc::POLLHUP | libc::POLLERR)
                    && p.events & libc::POLLIN != 0
                {
                    libc::FD_SET(p.fd, rd);
                    count += 1;
                }
                if !wr.is_null()
                    && hit(libc::POLLOUT | libc::POLLERR)
                    && p.events & libc::POLLOUT != 0
                {
                    libc::FD_SET(p.fd, wr);
                    count += 1;
                }
                if !ex.is_null() && hit(libc::POLLPRI) {
                    libc::FD_SET(p.fd, ex);
                    count += 1;
                }
            }
            Ok(count)
        }
    })
}
