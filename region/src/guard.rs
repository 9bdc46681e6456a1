//! Fault-tolerant access to an application's pages.
//!
//! A NIC (or kernel rxe) pins a registered region's pages: when the
//! application unmaps or write-protects them without deregistering, the
//! HCA keeps using the pinned pages and the process never faults. We
//! cannot pin; we copy with the CPU. So the copies into and out of an
//! external region are made **fault-tolerant**, as the kernel's own
//! `copy_from_user` is: each is one instruction (`rep movsb`, or `lock
//! cmpxchg` for atomics) at a known address, and a `SIGSEGV`/`SIGBUS`
//! handler that finds the faulting instruction pointer at one of those
//! addresses moves it to the routine's fix-up, which returns "faulted".
//! The access then fails like a revoked region's does: a peer's WRITE,
//! READ or atomic gets a NAK (remote access error), a local post an
//! error completion. Every other fault goes on to the handler that was
//! installed before ours (or the default action: the process dies as it
//! would without us).
//!
//! Cost: none on the data path beyond the copy itself (`rep movsb` copies
//! at `memcpy`'s speed on CPUs with ERMS), no system call. The handler is
//! installed once, when the first external region is made.
//!
//! Limits: x86-64 Linux only (elsewhere [`copy`] and [`cas`] are plain
//! accesses, as before); a program that installs its own `SIGSEGV`
//! handler afterwards without chaining to ours gets the fault itself; and
//! pages unmapped and then mapped again at the same address are written
//! as they now are (the kernel would have written the old, pinned pages).

/// Copy `len` bytes from `src` to `dst`; `false` if a page of either
/// faulted (some bytes may have been copied).
///
/// # Safety
/// `dst` and `src` must not overlap and must not be memory whose
/// modification or reading breaks Rust's rules for this process (Rust
/// references, our own stack): only an external region's bytes and our
/// own buffers. A fault in them is survived; anything else is not.
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> bool {
    imp::copy(dst, src, len)
}

/// Compare-and-swap of the 8-aligned u64 at `p`: `Some(previous value)`,
/// or `None` if the page faulted.
///
/// # Safety
/// `p` must be 8-aligned and point into an external region (see
/// [`copy`]).
pub unsafe fn cas(p: *mut u64, expected: u64, new: u64) -> Option<u64> {
    imp::cas(p, expected, new)
}

/// Install the fault handler (once; later calls do nothing).
pub fn install() {
    imp::install();
}

/// Faults survived by [`copy`] and [`cas`] in this process.
pub fn faults() -> u64 {
    imp::FAULTS.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Once;

    pub static FAULTS: AtomicU64 = AtomicU64::new(0);

    // The routines, in the System V calling convention. Each faulting
    // instruction has a label before it (`*_at`) and a fix-up label; the
    // handler maps the first to the second.
    //
    // roce_region_copy(dst rdi, src rsi, len rdx) -> rax: bytes NOT copied
    //   (`rep movsb` keeps its registers exact when a fault interrupts it:
    //   rcx is the count left).
    // roce_region_cas(p rdi, expected rsi, new rdx, out rcx) -> eax: 0 with
    //   the previous value stored at *out, or 1 if the page faulted.
    std::arch::global_asm!(
        ".pushsection .text.roce_region_guard,\"ax\",@progbits",
        ".p2align 4",
        ".globl roce_region_copy",
        ".hidden roce_region_copy",
        ".type roce_region_copy,@function",
        "roce_region_copy:",
        "    mov rcx, rdx",
        ".globl roce_region_copy_at",
        ".hidden roce_region_copy_at",
        "roce_region_copy_at:",
        "    rep movsb",
        "    xor eax, eax",
        "    ret",
        ".globl roce_region_copy_fixup",
        ".hidden roce_region_copy_fixup",
        "roce_region_copy_fixup:",
        "    mov rax, rcx",
        "    test rax, rax",
        "    jnz 2f",
        "    mov rax, 1",
        "2:",
        "    ret",
        ".size roce_region_copy, . - roce_region_copy",
        ".p2align 4",
        ".globl roce_region_cas",
        ".hidden roce_region_cas",
        ".type roce_region_cas,@function",
        "roce_region_cas:",
        "    mov rax, rsi",
        ".globl roce_region_cas_at",
        ".hidden roce_region_cas_at",
        "roce_region_cas_at:",
        "    lock cmpxchg qword ptr [rdi], rdx",
        "    mov qword ptr [rcx], rax",
        "    xor eax, eax",
        "    ret",
        ".globl roce_region_cas_fixup",
        ".hidden roce_region_cas_fixup",
        "roce_region_cas_fixup:",
        "    mov eax, 1",
        "    ret",
        ".size roce_region_cas, . - roce_region_cas",
        ".popsection",
    );

    extern "C" {
        fn roce_region_copy(dst: *mut u8, src: *const u8, len: usize) -> usize;
        fn roce_region_cas(p: *mut u64, expected: u64, new: u64, out: *mut u64) -> u32;
        static roce_region_copy_at: u8;
        static roce_region_copy_fixup: u8;
        static roce_region_cas_at: u8;
        static roce_region_cas_fixup: u8;
    }

    pub fn copy(dst: *mut u8, src: *const u8, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        // SAFETY: the routine copies `len` bytes forward with `rep movsb`
        // and touches nothing else (rcx, rsi, rdi, rax are caller-saved;
        // the direction flag is clear at every call by the ABI). The
        // caller vouches for the two ranges (see guard::copy); a fault in
        // them is turned into a return by the handler, which must be
        // installed for that: it is, by install(), before any external
        // region exists.
        unsafe { roce_region_copy(dst, src, len) == 0 }
    }

    pub fn cas(p: *mut u64, expected: u64, new: u64) -> Option<u64> {
        let mut out = 0u64;
        // SAFETY: as copy(): one `lock cmpxchg` on the caller's aligned
        // word, and a store into our own `out`.
        let r = unsafe { roce_region_cas(p, expected, new, &mut out) };
        (r == 0).then_some(out)
    }

    /// The handlers that were installed before ours, for SIGSEGV and SIGBUS.
    static mut PREV: [libc::sigaction; 2] = [unsafe_zeroed(), unsafe_zeroed()];
    static INSTALL: Once = Once::new();

    const fn unsafe_zeroed() -> libc::sigaction {
        // SAFETY: all-zero is a valid sigaction (SIG_DFL, empty mask, no
        // flags); `zeroed` is const-callable for it.
        unsafe { std::mem::zeroed() }
    }

    pub fn install() {
        INSTALL.call_once(|| {
            for (i, sig) in [libc::SIGSEGV, libc::SIGBUS].into_iter().enumerate() {
                // SAFETY: all-zero is a valid sigaction; we fill in the
                // handler, its flags and an empty mask. PREV is written
                // here only, inside call_once, before our handler can run
                // (it is installed by this very sigaction call, which
                // stores the previous action first), and only read by the
                // handler afterwards.
                unsafe {
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = handler as *const () as usize;
                    sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
                    libc::sigemptyset(&mut sa.sa_mask);
                    let prev = std::ptr::addr_of_mut!(PREV[i]);
                    // (if this fails, faults kill the process as before)
                    libc::sigaction(sig, &sa, prev);
                }
            }
        });
    }

    extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // Async-signal-safe: reads and writes of the interrupted context,
        // an atomic add, and a call of the previous handler.
        // SAFETY: the kernel passes a valid ucontext_t for an SA_SIGINFO
        // handler; REG_RIP indexes its general registers on x86-64.
        let rip = unsafe {
            &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize]
        };
        // (the addresses of the routines' labels, never read)
        let (copy_at, copy_fix, cas_at, cas_fix) = (
            std::ptr::addr_of!(roce_region_copy_at) as i64,
            std::ptr::addr_of!(roce_region_copy_fixup) as i64,
            std::ptr::addr_of!(roce_region_cas_at) as i64,
            std::ptr::addr_of!(roce_region_cas_fixup) as i64,
        );
        let fix = if *rip == copy_at {
            Some(copy_fix)
        } else if *rip == cas_at {
            Some(cas_fix)
        } else {
            None
        };
        if let Some(f) = fix {
            FAULTS.fetch_add(1, Ordering::Relaxed);
            *rip = f;
            return;
        }
        let i = if sig == libc::SIGSEGV { 0 } else { 1 };
        // SAFETY: PREV[i] was written once before this handler was
        // installed (see install) and is never written again.
        let prev = unsafe { std::ptr::addr_of!(PREV[i]).read() };
        if prev.sa_flags & libc::SA_SIGINFO != 0 && prev.sa_sigaction > 1 {
            // SAFETY: the previous handler was installed with SA_SIGINFO, so
            // it takes these three arguments; we pass what the kernel gave us.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(prev.sa_sigaction) };
            f(sig, info, ctx);
        } else if prev.sa_sigaction > 1 {
            // SAFETY: a plain handler (no SA_SIGINFO) takes the signal number.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
            f(sig);
        } else {
            // SIG_DFL (0) or SIG_IGN (1): put it back and return; the
            // instruction faults again and the kernel takes that action
            // (a synchronous fault cannot be ignored: it kills).
            // SAFETY: restoring the action that was there before ours.
            unsafe {
                libc::sigaction(sig, &prev, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use std::sync::atomic::{AtomicU64, Ordering};
    pub static FAULTS: AtomicU64 = AtomicU64::new(0);

    pub fn copy(dst: *mut u8, src: *const u8, len: usize) -> bool {
        // SAFETY: the caller vouches for both ranges (guard::copy).
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        true
    }

    pub fn cas(p: *mut u64, expected: u64, new: u64) -> Option<u64> {
        // SAFETY: the caller vouches that p is aligned and valid.
        let a = unsafe { std::sync::atomic::AtomicU64::from_ptr(p) };
        Some(match a.compare_exchange(expected, new, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        })
    }

    pub fn install() {}
}
