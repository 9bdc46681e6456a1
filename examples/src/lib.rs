//! Shared code of the example programs (see `examples/README.md`):
//!
//! * [`open_device`]: pick a device like rdma-core's tools (`-d NAME` from
//!   `ROCE_EMU_DEVICES` or the configuration file, else the first
//!   configured one), or the `--addr IP` extension.
//! * [`oob`]: the out-of-band TCP exchange of rdma-core's
//!   `ibv_{rc,uc,ud,srq}_pingpong` (`LID:QPN:PSN:GID` in 52 bytes).
//! * [`pingpong`]: the RC/UC/UD pingpong tools themselves.
//! * [`srq_pingpong`]: the SRQ pingpong tool (many RC QPs, one SRQ).
//! * [`keyx`]: the small TCP key exchange of the RDMA WRITE/READ/atomic
//!   examples.

// The option help texts are rdma-core's, with their `<port>` placeholders.
#![allow(rustdoc::invalid_html_tags)]

pub mod keyx;
pub mod oob;
pub mod pingpong;
pub mod srq_pingpong;

use roce_host::DeviceConfig;
use roce_verbs_api::Device;
use std::net::IpAddr;

/// Parse a number like C's `strtoul(s, NULL, 0)`: decimal, `0x` hex or
/// leading-zero octal.
pub fn parse_c_number(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    };
    r.map_err(|_| format!("invalid number {s:?}"))
}

/// Open the device the tool was asked for: `-d NAME` (a configured
/// device, or with `--addr` a UDP device of that name), `--addr IP` alone
/// (a UDP device named `roce0`), or else the first configured device.
/// Errors are the messages rdma-core's tools print.
pub fn open_device(name: Option<&str>, addr: Option<IpAddr>) -> Result<Device, String> {
    open_device_with(name, addr, None)
}

/// [`open_device`], recording every frame to `pcap` when given (the
/// `--pcap FILE` extension; `ROCE_EMU_PCAP=DIR` works without it).
pub fn open_device_with(
    name: Option<&str>,
    addr: Option<IpAddr>,
    pcap: Option<&std::path::Path>,
) -> Result<Device, String> {
    let mut cfg = match (name, addr) {
        (n, Some(a)) => DeviceConfig::udp(n.unwrap_or("roce0"), a),
        (Some(n), None) => DeviceConfig::find(n)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("IB device {n} not found"))?,
        (None, None) => {
            DeviceConfig::load_all().map_err(|e| e.to_string())?.into_iter().next().ok_or_else(
                || {
                    "No IB devices found (configure one with ROCE_EMU_DEVICES=roce0=udp:127.0.0.2, \
                 a devices.conf file, or --addr IP)"
                        .to_string()
                },
            )?
        }
    };
    if let Some(p) = pcap {
        cfg.pcap = Some(p.to_path_buf());
    }
    cfg.open().map_err(|e| format!("Couldn't get context for {}: {e}", cfg.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_numbers() {
        assert_eq!(parse_c_number("18515"), Ok(18515));
        assert_eq!(parse_c_number("0x10"), Ok(16));
        assert_eq!(parse_c_number("010"), Ok(8));
        assert_eq!(parse_c_number("0"), Ok(0));
        assert!(parse_c_number("x").is_err());
        assert!(parse_c_number("").is_err());
    }
}
