//! Errors of this crate's own making. Each verb otherwise returns the
//! emulator's typed error named after it (`RegMrError`, `ModifyQpError`,
//! `PostSendError`...), re-exported at the crate root.

use std::fmt;
use std::sync::Arc;

/// An explicit `destroy()` failed. The handle is consumed either way; a
/// shared object is destroyed when its last handle is dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DestroyError<E> {
    /// Other handles still refer to the object (clones, or children such as
    /// the MRs and QPs of a PD, or the QPs using a CQ).
    Shared {
        /// The kind of object ("PD", "MR", "CQ", "QP").
        what: &'static str,
        /// How many other handles exist.
        others: usize,
    },
    /// The device refused.
    Verb(E),
}

impl<E: fmt::Display> fmt::Display for DestroyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DestroyError::Shared { what, others } => write!(
                f,
                "{what} still has {others} other handle(s) (clones or objects using it); \
                 it is destroyed when the last one is dropped"
            ),
            DestroyError::Verb(e) => e.fmt(f),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for DestroyError<E> {}

impl<E> DestroyError<E> {
    /// For an explicit `destroy()`: the object behind `arc` when `arc` is
    /// its last handle, else [`DestroyError::Shared`] naming it `what`.
    pub(crate) fn sole<T>(arc: Arc<T>, what: &'static str) -> Result<T, DestroyError<E>> {
        Arc::try_unwrap(arc)
            .map_err(|arc| DestroyError::Shared { what, others: Arc::strong_count(&arc) - 1 })
    }
}

/// For `Drop`: run `destroy`, the verb of an object whose last handle went
/// without an explicit `destroy()` (`destroyed` false), and log a failure
/// (a drop cannot return it).
pub(crate) fn destroy_on_drop<E: fmt::Display>(
    destroyed: bool,
    verb: &str,
    id: impl fmt::Display,
    destroy: impl FnOnce() -> Result<(), E>,
) {
    if destroyed {
        return;
    }
    if let Err(e) = destroy() {
        tracing::warn!(%id, error = %e, "{verb} in drop failed");
    }
}

/// `attach_mcast` failed: the device refused, or the wire could not join
/// the group.
#[derive(Debug)]
pub enum McastAttachError {
    /// The device refused (not UD, not a multicast address, limits).
    Verb(roce_emulator::McastError),
    /// Joining the IP group failed (the socket's `IP_ADD_MEMBERSHIP`).
    Join(std::io::Error),
}

impl McastAttachError {
    /// The errno rdma-core gives: the device's, or the join's.
    pub fn errno(&self) -> i32 {
        match self {
            McastAttachError::Verb(e) => e.errno(),
            McastAttachError::Join(e) => e.raw_os_error().unwrap_or(95), // EOPNOTSUPP
        }
    }
}

impl fmt::Display for McastAttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McastAttachError::Verb(e) => e.fmt(f),
            McastAttachError::Join(e) => write!(f, "cannot join the IP multicast group: {e}"),
        }
    }
}

impl std::error::Error for McastAttachError {}

impl From<roce_emulator::McastError> for McastAttachError {
    fn from(e: roce_emulator::McastError) -> Self {
        McastAttachError::Verb(e)
    }
}
