//! GIDs and GUIDs of emulated devices, as rxe derives them from the
//! port's address: the GID table ([`gid_table`]: index 0 the link-local
//! GID, index 1 the RoCEv2 GID), the node GUID, and back from a GID to
//! the address it names.

use std::net::{IpAddr, Ipv6Addr};

/// The MAC address a device at `addr` pretends to have: `02:00` and the
/// last four address bytes (the same as the pcap recorder's frames).
pub use roce_emulator::objects::{eui64, gid_table, mac_of};

/// The node GUID of a device at `addr` (the EUI-64 of its MAC, as rxe).
pub fn node_guid(addr: IpAddr) -> u64 {
    u64::from_be_bytes(eui64(mac_of(addr)))
}

/// The RoCEv2 GID of an address (`::ffff:a.b.c.d` for IPv4).
pub fn roce_v2_gid(addr: IpAddr) -> Ipv6Addr {
    roce_emulator::objects::gid_of(addr)
}

/// The device address a GID names: an ordinary RoCEv2 GID (IPv4-mapped
/// or a global IPv6 address) names itself; the link-local GID of an
/// emulated IPv4 device (index 0 of [`gid_table`]: `fe80::` + the EUI-64 of
/// its MAC `02:00:a:b:c:d`) names the device's address `a.b.c.d`, so a
/// program that addresses a peer by GID index 0, as rdma-core's tests do
/// by default, reaches it over UDP.
pub fn gid_to_addr(gid: Ipv6Addr) -> IpAddr {
    if let Some(v4) = gid.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let o = gid.octets();
    if o[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0]
        && o[8] == 0
        && o[9] == 0
        && o[11] == 0xff
        && o[12] == 0xfe
    {
        return IpAddr::V4(std::net::Ipv4Addr::new(o[10], o[13], o[14], o[15]));
    }
    IpAddr::V6(gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_table_like_rxe() {
        // rxe: MAC 52:54:00:77:00:02 -> GID[0] fe80::5054:ff:fe77:2, GUID 5054:00ff:fe77:0002
        let e = eui64([0x52, 0x54, 0x00, 0x77, 0x00, 0x02]);
        assert_eq!(e, [0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x02]);
        let t = gid_table("127.0.0.2".parse().unwrap());
        assert_eq!(t[0].to_string(), "fe80::7fff:fe00:2");
        assert_eq!(t[1].to_string(), "::ffff:127.0.0.2");
        assert_eq!(node_guid("127.0.0.2".parse().unwrap()), 0x0000_7fff_fe00_0002);
        let t6 = gid_table("fd00::5".parse().unwrap());
        assert_eq!(t6[1].to_string(), "fd00::5");
        assert_eq!(gid_to_addr(t[1]), "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(gid_to_addr(t[0]), "127.0.0.2".parse::<IpAddr>().unwrap());
        let other: Ipv6Addr = "fe80::1234:56ff:fe78:9abc".parse().unwrap();
        assert_eq!(gid_to_addr(other), IpAddr::V6(other), "a real NIC's link-local GID");
    }
}
