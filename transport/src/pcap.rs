//! Recording the frames a transport sends and receives to a pcap file.
//!
//! Each datagram is written as an Ethernet II frame with the IP and UDP
//! headers the transport computed the ICRC over (for received IPv4
//! datagrams, the identification the ICRC was verified with; TTL 64) and
//! the wall-clock time of the send or receive. The MAC addresses are made
//! up from the IP addresses (`02:00` + the last four address bytes).

use crate::counters::TransportCounters;
use core::net::IpAddr;
use roce_packet::{IpMeta, UdpEndpoints};
use roce_pcap::{CaptureError, LinkType, PcapWriter};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// A `Write` over a shared buffered file, so the recorder can flush it
/// while the pcap writer owns it. Writes are staged and reach the buffered
/// file one whole record at a time ([`Shared::commit`]), so the file never
/// ends inside a record, even when the process exits without dropping the
/// recorder (a C program that never closes its device): it holds every
/// record the buffer let through, each complete.
#[derive(Clone)]
pub(crate) struct Shared(Arc<Mutex<Staged>>);

struct Staged {
    out: BufWriter<File>,
    pending: Vec<u8>,
    /// The process that made it: a child forked without exec has a copy of
    /// the buffer, which is the parent's to write.
    pid: u32,
}

/// Every recording of this process, to flush at its exit
/// ([`flush_all`]).
static OPEN: Mutex<Vec<std::sync::Weak<Mutex<Staged>>>> = Mutex::new(Vec::new());

/// Flush the whole records of every recording this process made that is
/// still open. For a process that exits without closing its devices (a C
/// program that returns from `main` with them open): the drop-in calls it
/// at exit. A recording whose lock another thread holds at that moment
/// (between two records) is skipped, never waited for; one inherited over
/// `fork` is left alone (its buffered records are the parent's to write).
pub fn flush_all() {
    let Ok(mut open) = OPEN.try_lock() else { return };
    open.retain(|w| w.strong_count() > 0);
    let me = std::process::id();
    for w in open.iter() {
        if let Some(s) = w.upgrade() {
            if let Ok(mut g) = s.try_lock() {
                if g.pid == me {
                    let _ = g.out.flush();
                }
            }
        }
    }
}

impl Shared {
    /// A staged, buffered writer over a new (truncated) file.
    pub(crate) fn create(path: &Path) -> std::io::Result<Shared> {
        let s = Arc::new(Mutex::new(Staged {
            out: BufWriter::new(File::create(path)?),
            pending: Vec::new(),
            pid: std::process::id(),
        }));
        if let Ok(mut open) = OPEN.lock() {
            open.retain(|w| w.strong_count() > 0);
            open.push(Arc::downgrade(&s));
        }
        Ok(Shared(s))
    }

    fn lock(&self) -> std::io::Result<std::sync::MutexGuard<'_, Staged>> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))
    }

    /// Move the staged bytes (whole records) to the buffered file.
    pub(crate) fn commit(&self) -> std::io::Result<()> {
        let mut g = self.lock()?;
        let s = &mut *g;
        let r = s.out.write_all(&s.pending);
        s.pending.clear();
        r
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lock()?.pending.extend_from_slice(buf);
        Ok(buf.len())
    }
    /// Flush what was committed. Staged bytes stay staged: a flush from
    /// another thread (a device closed or a process exiting while the
    /// driver thread is between a record's header and its data) must not
    /// put half a record in the file; [`PcapRecorder::record`] commits each
    /// record once it is whole.
    fn flush(&mut self) -> std::io::Result<()> {
        self.lock()?.out.flush()
    }
}

/// Writes every frame to a pcap file (see the module documentation).
pub struct PcapRecorder {
    writer: PcapWriter<Shared>,
    file: Shared,
}

/// The made-up MAC address of an IP address.
pub fn mac_of(ip: IpAddr) -> [u8; 6] {
    roce_emulator::objects::mac_of(ip)
}

impl PcapRecorder {
    /// Create (truncate) `path` and write the pcap header.
    pub fn create(path: &Path) -> Result<PcapRecorder, CaptureError> {
        let file = Shared::create(path)?;
        let writer = PcapWriter::new(file.clone(), LinkType::Ethernet)?;
        file.commit()?;
        Ok(PcapRecorder { writer, file })
    }

    /// Append one datagram as a frame stamped with the current time.
    pub fn record(
        &mut self,
        ep: &UdpEndpoints,
        meta: &IpMeta,
        payload: &[u8],
        c: &TransportCounters,
    ) {
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let ok =
            roce_packet::frame::ethernet_frame(mac_of(ep.src), mac_of(ep.dst), ep, meta, payload)
                .ok()
                .map(|f| self.writer.write_frame(ts, &f).is_ok() && self.file.commit().is_ok())
                .unwrap_or(false);
        let counter = if ok { &c.pcap_frames } else { &c.pcap_errors };
        TransportCounters::add(counter, 1);
    }

    /// Flush buffered frames to the file.
    pub fn flush(&mut self) {
        let _ = self.file.flush();
    }
}

impl Drop for PcapRecorder {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod staged_tests {
    use super::Shared;
    use std::io::Write;

    /// A recording still open (never dropped, as in a process that exits
    /// with its device open) reaches its file through `flush_all`.
    #[test]
    fn flush_all_writes_what_open_recordings_hold() {
        let p = std::env::temp_dir().join(format!("roce-pcap-flushall-{}", std::process::id()));
        let mut f = Shared::create(&p).unwrap();
        f.write_all(&[7; 100]).unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0, "buffered");
        // as if inherited over fork: another process's buffer, not written
        f.0.lock().unwrap().pid = u32::MAX;
        super::flush_all();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0, "a child leaves the parent's records");
        f.0.lock().unwrap().pid = std::process::id();
        super::flush_all();
        assert_eq!(std::fs::read(&p).unwrap(), vec![7; 100]);
        drop(f);
        let _ = std::fs::remove_file(&p);
    }

    /// A flush between a record's header and its data (another thread
    /// closing the device) leaves the file at the last whole record.
    #[test]
    fn a_flush_never_writes_half_a_record() {
        let dir = std::env::temp_dir().join(format!("roce-staged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pcap");
        let mut f = Shared::create(&path).unwrap();
        f.write_all(b"HEADER").unwrap();
        f.commit().unwrap();
        f.write_all(b"rec1-head").unwrap();
        f.flush().unwrap(); // mid-record: nothing of it may reach the file
        assert_eq!(std::fs::read(&path).unwrap(), b"HEADER");
        f.write_all(b"rec1-data").unwrap();
        f.commit().unwrap();
        f.flush().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"HEADERrec1-headrec1-data");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
