//! Signals and the library's own threads.
//!
//! A process-directed signal (`alarm()`'s SIGALRM, a terminal's SIGINT) goes
//! to any thread that does not block it. Programs written for rdma-core
//! have no threads of the library's, and expect the signal to interrupt
//! their own blocking call (`ibv_get_cq_event`'s read(2) returns EINTR;
//! qperf stops its timed tests that way). So every thread this workspace
//! starts for a device ([`spawn_quiet`]) blocks the signals a program
//! handles, and a caller blocked in the engine ([`crate::Engine::progress`])
//! learns that a signal interrupted its wait ([`take_interrupted`]).

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use std::cell::Cell;

thread_local! {
    static INTERRUPTED: Cell<bool> = const { Cell::new(false) };
}

/// Note that a signal interrupted this thread's wait (EINTR).
pub(crate) fn note_interrupted() {
    INTERRUPTED.with(|c| c.set(true));
}

/// Whether a signal interrupted this thread's wait (not cleared).
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.with(|c| c.get())
}

/// Whether a signal interrupted this thread's wait in the engine since the
/// last call (and clear it).
pub fn take_interrupted() -> bool {
    INTERRUPTED.with(|c| c.replace(false))
}

/// Start a thread with the signals a program may handle blocked (all but
/// the synchronous ones a fault raises: SIGSEGV, SIGBUS, SIGFPE, SIGILL,
/// SIGTRAP, SIGABRT, SIGSYS), so they reach the program's threads.
pub fn spawn_quiet<F, T>(name: String, f: F) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut set = SigSet::all();
    for s in [
        Signal::SIGSEGV,
        Signal::SIGBUS,
        Signal::SIGFPE,
        Signal::SIGILL,
        Signal::SIGTRAP,
        Signal::SIGABRT,
        Signal::SIGSYS,
    ] {
        set.remove(s);
    }
    // (the new thread inherits the mask in force when it is created)
    let old = set.thread_swap_mask(SigmaskHow::SIG_BLOCK).map_err(std::io::Error::from)?;
    let r = std::thread::Builder::new().name(name).spawn(f);
    let _ = old.thread_set_mask();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_thread_blocks_signals_and_the_caller_keeps_its_mask() {
        let before = SigSet::thread_get_mask().unwrap();
        let h = spawn_quiet("quiet".into(), || {
            let m = SigSet::thread_get_mask().unwrap();
            (m.contains(Signal::SIGALRM), m.contains(Signal::SIGINT), m.contains(Signal::SIGSEGV))
        })
        .unwrap();
        assert_eq!(h.join().unwrap(), (true, true, false));
        assert_eq!(SigSet::thread_get_mask().unwrap(), before);
        assert!(!take_interrupted());
        note_interrupted();
        assert!(take_interrupted() && !take_interrupted());
    }
}
