//! A pcap capture of the simulated fabric (`roce demo --pcap`): every
//! delivered frame, stamped with the virtual clock.

use roce_sim::SimNet;
use roce_sim::TapId;
use std::io::Write;
use std::marker::PhantomData;

/// A running capture into a `W`.
pub struct PcapTap<W> {
    id: TapId,
    writer: PhantomData<W>,
}

impl<W: Write + Send + 'static> PcapTap<W> {
    /// Start recording what `net` delivers into `w`.
    pub fn start(net: &SimNet, w: W) -> Result<PcapTap<W>, String> {
        let id = net.with_fabric(|f| f.record_pcap(w)).map_err(|e| e.to_string())?;
        Ok(PcapTap { id, writer: PhantomData })
    }

    /// Stop recording and flush the file.
    pub fn finish(self, net: &SimNet) -> Result<(), String> {
        net.with_fabric(|f| f.finish_pcap::<W>(self.id))
            .map_err(|e| e.to_string())
            .and_then(|mut w| w.flush().map_err(|e| e.to_string()))
    }
}
