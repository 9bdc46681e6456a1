//! The event queue behind completion channels and the async event
//! channel: events with a file descriptor that is readable while they are
//! pending, a blocking wait and wakers for futures.

use crate::driver::{poll_progress, Budget, Driver};
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Queue<T> {
    events: VecDeque<(T, bool)>,
    /// Threads in [`EventQueue::wait`].
    waiting: usize,
}

/// An event queue with a file descriptor: one byte in a socket pair per
/// pending event (a full socket only means "readable"), for
/// blocking waiters and wakers for futures. Shared by completion channels
/// and the async event channel.
///
/// An event pushed while a thread waits in [`EventQueue::wait`] (which
/// takes it at once) writes no byte: the two system calls of signalling
/// and taking back are saved on the common path of `ibv_get_cq_event`.
/// Events still queued when the last waiter leaves are signalled then, so
/// the descriptor is readable whenever events are pending and nobody is
/// taking them.
pub(crate) struct EventQueue<T> {
    /// Each event with whether its byte was written.
    queue: Mutex<Queue<T>>,
    wakers: Mutex<Vec<Waker>>,
    pub(crate) rx: UnixStream,
    tx: UnixStream,
}

impl<T> EventQueue<T> {
    pub(crate) fn new() -> std::io::Result<EventQueue<T>> {
        let (rx, tx) = UnixStream::pair()?;
        // The read end stays in blocking mode: it is the descriptor users
        // poll (and C programs may set O_NONBLOCK on it themselves, as on
        // libibverbs' channel fd); our own reads never block (MSG_DONTWAIT).
        tx.set_nonblocking(true)?;
        Ok(EventQueue {
            queue: Mutex::new(Queue { events: VecDeque::new(), waiting: 0 }),
            wakers: Mutex::new(Vec::new()),
            rx,
            tx,
        })
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.queue).events.len()
    }

    pub(crate) fn push(&self, e: T) {
        {
            let mut q = lock(&self.queue);
            let signal = q.waiting == 0;
            q.events.push_back((e, signal));
            if signal {
                let _ = (&self.tx).write(&[1]);
            }
        }
        for w in std::mem::take(&mut *lock(&self.wakers)) {
            w.wake();
        }
    }

    fn take_byte(&self) {
        let mut b = [0u8; 1];
        let _ = nix::sys::socket::recv(
            self.rx.as_raw_fd(),
            &mut b,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        );
    }

    /// Drop the queued events `gone` picks (and their bytes on the fd).
    pub(crate) fn discard(&self, gone: impl Fn(&T) -> bool) -> usize {
        let mut q = lock(&self.queue);
        let before = q.events.len();
        let mut bytes = 0;
        q.events.retain(|(e, signalled)| {
            let drop = gone(e);
            bytes += usize::from(drop && *signalled);
            !drop
        });
        for _ in 0..bytes {
            self.take_byte();
        }
        before - q.events.len()
    }

    pub(crate) fn pop(&self) -> Option<T> {
        let (e, signalled) = lock(&self.queue).events.pop_front()?;
        if signalled {
            self.take_byte();
        }
        Some(e)
    }

    /// Blocking get: let the driver make progress in this thread (a real
    /// device's engine receives on its sockets here and sleeps on them; the
    /// simulated fabric steps) until an event is there, calling `process`
    /// (move events from the device) before each check.
    pub(crate) fn wait(
        &self,
        driver: &dyn Driver,
        timeout: Duration,
        process: impl Fn(),
    ) -> Option<T> {
        let budget = Budget { events: 1_000_000, wall: timeout };
        lock(&self.queue).waiting += 1;
        driver.progress(
            &mut || {
                process();
                self.len() > 0
            },
            budget,
        );
        let e = self.pop();
        // the last waiter leaving signals what it did not take
        let mut q = lock(&self.queue);
        q.waiting -= 1;
        if q.waiting == 0 {
            for (_, signalled) in q.events.iter_mut().filter(|(_, s)| !*s) {
                let _ = (&self.tx).write(&[1]);
                *signalled = true;
            }
        }
        e
    }

    /// One poll of a future waiting for an event taken by `try_get`.
    pub(crate) fn poll_next(
        &self,
        driver: &dyn Driver,
        cx: &mut TaskContext<'_>,
        try_get: impl FnMut() -> Option<T>,
    ) -> Poll<T> {
        {
            let mut w = lock(&self.wakers);
            if !w.iter().any(|x| x.will_wake(cx.waker())) {
                w.push(cx.waker().clone());
            }
        }
        poll_progress(driver, cx, try_get)
    }
}
