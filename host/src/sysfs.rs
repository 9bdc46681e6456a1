//! The tree of files a kernel RDMA device shows under `/sys/class/infiniband`,
//! `/sys/class/infiniband_verbs` and `/dev/infiniband`, written for the
//! host's roce-emu devices into a directory of our own. `roce run` writes it
//! and points its preloaded shim (`libroce_preload.so`, crate `preload/`) at
//! it, so that UCX, Open MPI's openib BTL, libfabric and pyverbs, which read
//! these paths themselves, find the devices as they find kernel rxe.
//!
//! Written, for device `i` named `NAME` (formats as the kernel prints them):
//!
//! ```text
//! sys/class/infiniband/NAME/{node_guid,sys_image_guid,node_type,fw_ver,node_desc}
//! sys/class/infiniband/NAME/ports/1/{state,phys_state,link_layer,rate,lid,sm_lid,active_mtu}
//! sys/class/infiniband/NAME/ports/1/gids/N, pkeys/0
//! sys/class/infiniband/NAME/ports/1/gid_attrs/{types,ndevs}/N   (populated GIDs only)
//! sys/class/infiniband/NAME/device/net/NETDEV/                   (an empty directory)
//! sys/class/infiniband_verbs/abi_version
//! sys/class/infiniband_verbs/uverbsI/{ibdev,abi_version,dev}
//! dev/infiniband/uverbsI, dev/infiniband/rdma_cm   -> /dev/null
//! ```
//!
//! The character devices are symlinks to `/dev/null`: programs `stat()` them
//! (a readable, writable character device) and, with our libibverbs, never
//! talk to them.

use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

/// What the tree shows of one device.
#[derive(Clone, Debug)]
pub struct SysfsDevice {
    /// The device name (`roce0`).
    pub name: String,
    /// Its index in the device list (`uverbsN`).
    pub index: usize,
    /// Its GID table (the populated entries, index order).
    pub gids: Vec<Ipv6Addr>,
    /// Node GUID, host order.
    pub node_guid: u64,
    /// Firmware version.
    pub fw_ver: String,
    /// The network interface that owns the device's address (`lo`, `eth0`).
    pub netdev: Option<String>,
    /// The port's active MTU in bytes (256..4096).
    pub active_mtu: u32,
    /// When the address is not assigned to `netdev` but inside one of its
    /// subnets (127.0.0.2 on `lo`): that subnet's prefix length. The tree's
    /// `ifaddrs` then lists the address as `NETDEV:NAME` for the shim's
    /// `getifaddrs()` (see `preload/`).
    pub alias_prefix: Option<u8>,
}

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// A GID as the kernel prints it (`%pI6`: 8 groups of 4 hex digits).
pub fn gid_text(g: &Ipv6Addr) -> String {
    g.segments().iter().map(|s| format!("{s:04x}")).collect::<Vec<_>>().join(":")
}

fn put(path: &Path, text: &str) -> io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, format!("{text}\n"))
}

fn link_null(path: &Path) -> io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    match std::os::unix::fs::symlink("/dev/null", path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// Write the tree of `devs` under `root` (made if missing).
pub fn write_tree(root: &Path, devs: &[SysfsDevice]) -> io::Result<()> {
    let ib = root.join("sys/class/infiniband");
    let verbs = root.join("sys/class/infiniband_verbs");
    std::fs::create_dir_all(&ib)?;
    std::fs::create_dir_all(&verbs)?;
    std::fs::create_dir_all(root.join("dev/infiniband"))?;
    put(&verbs.join("abi_version"), "6")?;
    link_null(&root.join("dev/infiniband/rdma_cm"))?;
    let mut ifaddrs = String::new();
    for d in devs {
        let dev = ib.join(&d.name);
        put(&dev.join("node_guid"), &guid(d.node_guid))?;
        put(&dev.join("sys_image_guid"), &guid(d.node_guid))?;
        put(&dev.join("node_type"), "1: CA")?;
        put(&dev.join("fw_ver"), &d.fw_ver)?;
        put(&dev.join("node_desc"), &d.name)?;
        let port = dev.join("ports/1");
        put(&port.join("state"), "4: ACTIVE")?;
        put(&port.join("phys_state"), "5: LinkUp")?;
        put(&port.join("link_layer"), "Ethernet")?;
        put(&port.join("rate"), "100 Gb/sec (4X EDR)")?;
        put(&port.join("lid"), "0x0")?;
        put(&port.join("sm_lid"), "0x0")?;
        put(&port.join("active_mtu"), &d.active_mtu.to_string())?;
        put(&port.join("pkeys/0"), "0xffff")?;
        if let Some(n) = &d.netdev {
            // where pyverbs' tests find the device's netdev (then its address
            // from `ip addr show`)
            std::fs::create_dir_all(dev.join("device/net").join(n))?;
        }
        for (i, g) in d.gids.iter().enumerate() {
            put(&port.join(format!("gids/{i}")), &gid_text(g))?;
            put(&port.join(format!("gid_attrs/types/{i}")), "RoCE v2")?;
            if let Some(n) = &d.netdev {
                put(&port.join(format!("gid_attrs/ndevs/{i}")), n)?;
            }
        }
        let uv = verbs.join(format!("uverbs{}", d.index));
        put(&uv.join("ibdev"), &d.name)?;
        put(&uv.join("abi_version"), "1")?;
        put(&uv.join("dev"), &format!("231:{}", 192 + d.index))?;
        link_null(&root.join(format!("dev/infiniband/uverbs{}", d.index)))?;
        if let (Some(n), Some(p), Some(ip)) = (&d.netdev, d.alias_prefix, d.gids.get(1)) {
            // (an interface name is at most 15 bytes)
            let mut label = format!("{n}:{}", d.name);
            while label.len() > 15 {
                label.pop();
            }
            let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(*ip), IpAddr::V4);
            ifaddrs.push_str(&format!("{label} {ip} {p}\n"));
        }
    }
    std::fs::write(root.join("ifaddrs"), ifaddrs)?;
    Ok(())
}

/// The network interface that owns `addr`: the one it is assigned to,
/// else the one with a subnet that contains it (127.0.0.2 is `lo`'s).
pub fn netdev_of(addr: IpAddr) -> Option<String> {
    owner_of(addr).map(|o| o.0)
}

/// [`netdev_of`], and for an address that is only inside a subnet of the
/// interface, that subnet's prefix length (`None` when assigned).
pub fn owner_of(addr: IpAddr) -> Option<(String, Option<u8>)> {
    let ifs: Vec<_> = nix::ifaddrs::getifaddrs().ok()?.collect();
    let ip_of = |s: &Option<nix::sys::socket::SockaddrStorage>| -> Option<IpAddr> {
        let s = s.as_ref()?;
        if let Some(v4) = s.as_sockaddr_in() {
            return Some(IpAddr::V4(v4.ip()));
        }
        s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
    };
    if let Some(i) = ifs.iter().find(|i| ip_of(&i.address) == Some(addr)) {
        return Some((i.interface_name.clone(), None));
    }
    let prefix = |m: IpAddr| match m {
        IpAddr::V4(m) => u32::from(m).count_ones() as u8,
        IpAddr::V6(m) => u128::from(m).count_ones() as u8,
    };
    let within = |a: IpAddr, net: IpAddr, mask: IpAddr| match (a, net, mask) {
        (IpAddr::V4(a), IpAddr::V4(n), IpAddr::V4(m)) => {
            u32::from(a) & u32::from(m) == u32::from(n) & u32::from(m)
        }
        (IpAddr::V6(a), IpAddr::V6(n), IpAddr::V6(m)) => {
            u128::from(a) & u128::from(m) == u128::from(n) & u128::from(m)
        }
        _ => false,
    };
    ifs.iter().find_map(|i| match (ip_of(&i.address), ip_of(&i.netmask)) {
        (Some(n), Some(m)) if within(addr, n, m) => {
            Some((i.interface_name.clone(), Some(prefix(m))))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_reads_as_the_kernels() {
        let root = std::env::temp_dir().join(format!("roce-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let gids: Vec<Ipv6Addr> =
            vec!["fe80::ff:fe00:2".parse().unwrap(), "::ffff:127.0.0.2".parse().unwrap()];
        let d = SysfsDevice {
            name: "roce0".into(),
            index: 0,
            gids,
            node_guid: 0x0200_00ff_fe00_0002,
            fw_ver: "0.1.0".into(),
            netdev: netdev_of("127.0.0.2".parse().unwrap()),
            active_mtu: 1024,
            alias_prefix: owner_of("127.0.0.2".parse().unwrap()).and_then(|o| o.1),
        };
        write_tree(&root, &[d]).unwrap();
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let dev = "sys/class/infiniband/roce0";
        assert_eq!(read(&format!("{dev}/node_guid")), "0200:00ff:fe00:0002\n");
        assert_eq!(read(&format!("{dev}/node_type")), "1: CA\n");
        assert_eq!(read(&format!("{dev}/ports/1/state")), "4: ACTIVE\n");
        assert_eq!(read(&format!("{dev}/ports/1/link_layer")), "Ethernet\n");
        assert_eq!(
            read(&format!("{dev}/ports/1/gids/1")),
            "0000:0000:0000:0000:0000:ffff:7f00:0002\n"
        );
        assert_eq!(read(&format!("{dev}/ports/1/gid_attrs/types/1")), "RoCE v2\n");
        assert_eq!(read(&format!("{dev}/ports/1/gid_attrs/ndevs/1")), "lo\n", "127/8 is lo's");
        assert_eq!(read("sys/class/infiniband_verbs/uverbs0/ibdev"), "roce0\n");
        assert!(root.join(dev).join("device/net/lo").is_dir());
        assert_eq!(read("ifaddrs"), "lo:roce0 127.0.0.2 8\n", "127.0.0.2 is inside lo's /8");
        use std::os::unix::fs::FileTypeExt;
        let md = std::fs::metadata(root.join("dev/infiniband/uverbs0")).unwrap();
        assert!(md.file_type().is_char_device(), "stat() sees a character device");
        let _ = std::fs::remove_dir_all(&root);
    }
}
