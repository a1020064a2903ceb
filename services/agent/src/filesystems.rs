//! Filesystems: real mounts from `/proc/self/mounts`, usage and inodes from `statvfs`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

/// Filesystem types that hold no user data (kernel interfaces, memory, container plumbing).
const PSEUDO_TYPES: &[&str] = &[
    "autofs",
    "binfmt_misc",
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "devtmpfs",
    "efivarfs",
    "fusectl",
    "hugetlbfs",
    "mqueue",
    "nsfs",
    "proc",
    "pstore",
    "ramfs",
    "rpc_pipefs",
    "securityfs",
    "selinuxfs",
    "squashfs",
    "sysfs",
    "tmpfs",
    "tracefs",
    "nfsd",
    "fuse.gvfsd-fuse",
    "fuse.portal",
    "fuse.lxcfs",
];

/// Mount points under these hold kernel or runtime state, whatever their type.
const PSEUDO_PREFIXES: &[&str] = &["/proc", "/sys", "/dev", "/run"];

/// One line of `/proc/self/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub device: String,
    pub mount_point: String,
    pub fs_type: String,
}

/// Undoes the octal escapes the kernel writes for space, tab, newline and backslash.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .map(|d| d.iter().fold(0_u16, |acc, b| acc * 8 + u16::from(b - b'0')))
            .and_then(|v| u8::try_from(v).ok());
        if let Some(value) = octal {
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_pseudo(mount: &Mount) -> bool {
    PSEUDO_TYPES.contains(&mount.fs_type.as_str())
        || PSEUDO_PREFIXES
            .iter()
            .any(|p| mount.mount_point == *p || mount.mount_point.starts_with(&format!("{p}/")))
}

/// The real mounts of a mounts table, one per mount point (the last mount on a point hides the
/// earlier ones), in mount-point order.
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    let mut by_point = std::collections::BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(device), Some(point), Some(fs_type)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let mount = Mount {
            device: unescape(device),
            mount_point: unescape(point),
            fs_type: fs_type.to_owned(),
        };
        if is_pseudo(&mount) {
            by_point.remove(&mount.mount_point);
            continue;
        }
        by_point.insert(mount.mount_point.clone(), mount);
    }
    by_point.into_values().collect()
}

/// Usage of one filesystem, in bytes and inodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub inodes_total: u64,
    pub inodes_used: u64,
}

impl Usage {
    pub fn used_percent(&self) -> f64 {
        // As df computes it: used / (used + available to unprivileged users).
        let denominator = self.used_bytes + self.available_bytes;
        if denominator == 0 {
            0.0
        } else {
            self.used_bytes as f64 / denominator as f64 * 100.0
        }
    }

    pub fn inodes_percent(&self) -> f64 {
        if self.inodes_total == 0 {
            0.0
        } else {
            self.inodes_used as f64 / self.inodes_total as f64 * 100.0
        }
    }
}

/// A filesystem with its usage (`None` when `statvfs` failed or timed out).
#[derive(Debug, Clone, PartialEq)]
pub struct Filesystem {
    pub mount: Mount,
    pub usage: Option<Usage>,
}

fn statvfs(path: &str) -> Option<Usage> {
    let st = nix::sys::statvfs::statvfs(path).ok()?;
    let frag = st.fragment_size();
    let total = st.blocks().saturating_mul(frag);
    let free = st.blocks_free().saturating_mul(frag);
    let available = st.blocks_available().saturating_mul(frag);
    let files = st.files();
    Some(Usage {
        total_bytes: total,
        used_bytes: total.saturating_sub(free),
        available_bytes: available,
        inodes_total: files,
        inodes_used: files.saturating_sub(st.files_free()),
    })
}

/// Reads the mounts table at `mounts_path` and measures each real, directory mount point.
/// `statvfs` can hang on a dead network filesystem, so each runs off the runtime with a timeout.
pub async fn collect(mounts_path: &PathBuf, timeout: Duration) -> Vec<Filesystem> {
    let Ok(text) = tokio::fs::read_to_string(mounts_path).await else {
        return Vec::new();
    };
    let mut seen_devices = BTreeSet::new();
    let mut out = Vec::new();
    for mount in parse_mounts(&text) {
        let is_dir = tokio::fs::metadata(&mount.mount_point)
            .await
            .is_ok_and(|m| m.is_dir());
        // File bind mounts (/etc/hosts in containers) are not filesystems of their own.
        if !is_dir {
            continue;
        }
        let point = mount.mount_point.clone();
        let usage = tokio::time::timeout(
            timeout,
            tokio::task::spawn_blocking(move || statvfs(&point)),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
        // The same device bind-mounted twice is reported once, at its first mount point.
        if mount.device.starts_with('/') && !seen_devices.insert(mount.device.clone()) {
            continue;
        }
        out.push(Filesystem { mount, usage });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
sysfs /sys sysfs rw,nosuid 0 0
proc /proc proc rw 0 0
/dev/sda1 / ext4 rw,relatime 0 0
tmpfs /run tmpfs rw 0 0
/dev/sdb1 /mnt/my\\040disk xfs rw 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw 0 0
/dev/sda1 /var/lib/docker ext4 rw 0 0
overlay /var/lib/docker/overlay2/abc/merged overlay rw 0 0
shm /dev/shm tmpfs rw 0 0
/dev/loop0 /snap/core/1 squashfs ro 0 0
broken line
";

    #[test]
    fn keeps_real_filesystems_and_unescapes_names() {
        let mounts = parse_mounts(MOUNTS);
        let points: Vec<&str> = mounts.iter().map(|m| m.mount_point.as_str()).collect();
        assert_eq!(
            points,
            vec![
                "/",
                "/mnt/my disk",
                "/var/lib/docker",
                "/var/lib/docker/overlay2/abc/merged"
            ]
        );
        assert_eq!(mounts[1].fs_type, "xfs");
    }

    #[test]
    fn a_later_pseudo_mount_hides_a_real_one() {
        let mounts = parse_mounts("/dev/sda1 /data ext4 rw 0 0\ntmpfs /data tmpfs rw 0 0\n");
        assert!(mounts.is_empty());
    }

    #[test]
    fn unescape_handles_octal_and_plain_backslashes() {
        assert_eq!(unescape("a\\040b\\011c\\134d"), "a b\tc\\d");
        assert_eq!(unescape("trailing\\04"), "trailing\\04");
        assert_eq!(unescape("\\999"), "\\999");
    }

    #[test]
    fn usage_percentages_match_df() {
        let usage = Usage {
            total_bytes: 100,
            used_bytes: 40,
            available_bytes: 40,
            inodes_total: 10,
            inodes_used: 1,
        };
        assert_eq!(usage.used_percent(), 50.0);
        assert_eq!(usage.inodes_percent(), 10.0);
    }

    #[tokio::test]
    async fn measures_the_root_filesystem_of_this_machine() {
        let filesystems =
            collect(&PathBuf::from("/proc/self/mounts"), Duration::from_secs(5)).await;
        assert!(!filesystems.is_empty(), "no real filesystem found");
        assert!(
            filesystems
                .iter()
                .any(|f| f.usage.is_some_and(|u| u.total_bytes > 0))
        );
    }
}
