//! Run one `roce demo --scenario NAME` lesson: its lab, the faults of the
//! command line, the opening lines, the scenario, the summary and the
//! verdict. The front prints the transcript.

use super::capture::PcapTap;
use super::lab::Lab;
use super::scenarios::{fabric_of, SCENARIOS};
use roce_emulator::Counters;
use roce_sim::{FaultConfig, SimNet};
use std::io::Write;

/// A lesson on its way.
pub struct Lesson {
    lab: Lab,
    run: fn(&mut Lab) -> Result<(), String>,
}

impl Lesson {
    /// The lesson `name` (None: no such scenario) on a fabric of `seed`
    /// with `faults`, its opening lines written.
    pub fn new(name: &str, seed: u64, faults: FaultConfig) -> Option<Lesson> {
        let sc = SCENARIOS.iter().find(|s| s.name == name)?;
        let (active_mtu, link_mtu) = fabric_of(name);
        let mut lab = Lab::new(seed, active_mtu, link_mtu);
        let flags = [
            ("loss", faults.drop),
            ("dup", faults.duplicate),
            ("reorder", faults.reorder),
            ("corrupt", faults.corrupt),
        ]
        .iter()
        .filter(|(_, p)| *p > 0.0)
        .map(|(n, p)| format!(" --{n} {p}"))
        .collect::<String>();
        lab.net.set_faults(faults);
        lab.note(format!("scenario {}: {} (seed {seed}{flags})", sc.name, sc.about));
        lab.note("     time  who            what");
        Some(Lesson { lab, run: sc.run })
    }

    /// The simulated network (for a capture).
    pub fn net(&self) -> &SimNet {
        &self.lab.net
    }

    /// Record the fabric into `w`.
    pub fn capture<W: Write + Send + 'static>(&self, w: W) -> Result<PcapTap<W>, String> {
        PcapTap::start(&self.lab.net, w)
    }

    /// Run the scenario, what it left in flight, and the summary. `Err`:
    /// the scenario could not be set up.
    pub fn run(&mut self) -> Result<(), String> {
        let res = (self.run)(&mut self.lab);
        // leftovers (e.g. completions of a last step the scenario did not wait for)
        self.lab.run(100_000);
        res?;
        self.lab.summary();
        Ok(())
    }

    /// The line about a capture written to `path`.
    pub fn note_capture(&mut self, path: &str) {
        let frames = self.lab.net.stats().delivered;
        self.lab.note(format!(
            "pcap         {path}: {frames} frames (see them: roce decode {path} --ladder)"
        ));
    }

    /// The verdict (PASS: every expectation held), written last.
    pub fn finish(&mut self) -> bool {
        let ok = self.lab.unexpected.is_empty();
        self.lab.note(if ok { "PASS" } else { "FAIL" });
        ok
    }

    /// Everything the lesson wrote.
    pub fn transcript(&self) -> &str {
        &self.lab.out
    }

    /// Every device's name and counters (roce0, roce1 and those the
    /// scenario added).
    pub fn counters(&self) -> Vec<(String, Counters)> {
        self.lab.devices().iter().map(|c| (c.name().to_string(), c.counters())).collect()
    }
}
