//! The host itself: CPU, memory, load and uptime from `/proc`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Cumulative CPU time from the `cpu` line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    pub busy: u64,
    pub total: u64,
}

/// Parses the aggregate `cpu` line of `/proc/stat`. Idle time is `idle + iowait`.
pub fn parse_cpu_times(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if values.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest time is already in user/nice).
    let total: u64 = values.iter().take(8).sum();
    let idle = values[3] + values.get(4).copied().unwrap_or(0);
    Some(CpuTimes {
        busy: total.saturating_sub(idle),
        total,
    })
}

/// CPU use between two samples, in percent of all CPUs.
pub fn cpu_percent(before: CpuTimes, after: CpuTimes) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let busy = after.busy.checked_sub(before.busy)?;
    (total > 0).then(|| (busy as f64 / total as f64 * 100.0).clamp(0.0, 100.0))
}

/// Memory from `/proc/meminfo`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub total: u64,
    pub available: u64,
    pub swap_total: u64,
    pub swap_free: u64,
}

pub fn parse_meminfo(meminfo: &str) -> Option<Memory> {
    let fields: BTreeMap<&str, u64> = meminfo
        .lines()
        .filter_map(|line| {
            let (key, rest) = line.split_once(':')?;
            let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((key.trim(), kib * 1024))
        })
        .collect();
    let total = *fields.get("MemTotal")?;
    // Kernels before 3.14 have no MemAvailable; free + buffers + cached approximates it.
    let available = fields.get("MemAvailable").copied().unwrap_or_else(|| {
        ["MemFree", "Buffers", "Cached"]
            .iter()
            .filter_map(|k| fields.get(k))
            .sum()
    });
    Some(Memory {
        total,
        available: available.min(total),
        swap_total: fields.get("SwapTotal").copied().unwrap_or(0),
        swap_free: fields.get("SwapFree").copied().unwrap_or(0),
    })
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`.
pub fn parse_loadavg(loadavg: &str) -> Option<[f64; 3]> {
    let mut it = loadavg.split_whitespace().map(str::parse::<f64>);
    Some([it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?])
}

/// Seconds since boot from `/proc/uptime`.
pub fn parse_uptime(uptime: &str) -> Option<f64> {
    uptime.split_whitespace().next()?.parse().ok()
}

/// One reading of the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSample {
    pub cpu_percent: Option<f64>,
    pub memory: Option<Memory>,
    pub load: Option<[f64; 3]>,
    pub uptime_secs: Option<f64>,
    pub cpus: usize,
}

impl HostSample {
    /// As metric name -> value.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        if let Some(cpu) = self.cpu_percent {
            out.insert("cpu_percent".to_owned(), cpu);
        }
        if let Some(mem) = self.memory {
            let used = mem.total.saturating_sub(mem.available);
            out.insert("memory_total_bytes".to_owned(), mem.total as f64);
            out.insert("memory_used_bytes".to_owned(), used as f64);
            if mem.total > 0 {
                out.insert(
                    "memory_percent".to_owned(),
                    used as f64 / mem.total as f64 * 100.0,
                );
            }
            out.insert("swap_total_bytes".to_owned(), mem.swap_total as f64);
            out.insert(
                "swap_used_bytes".to_owned(),
                mem.swap_total.saturating_sub(mem.swap_free) as f64,
            );
        }
        if let Some([l1, l5, l15]) = self.load {
            out.insert("load1".to_owned(), l1);
            out.insert("load5".to_owned(), l5);
            out.insert("load15".to_owned(), l15);
        }
        if let Some(up) = self.uptime_secs {
            out.insert("uptime_seconds".to_owned(), up);
        }
        out
    }
}

/// Reads `/proc` (or a fixture root in tests); keeps the previous CPU times for the delta.
#[derive(Debug)]
pub struct HostCollector {
    proc_root: PathBuf,
    last_cpu: Option<CpuTimes>,
}

impl HostCollector {
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self {
            proc_root: proc_root.into(),
            last_cpu: None,
        }
    }

    async fn read(&self, name: &str) -> Option<String> {
        read_small(&self.proc_root.join(name)).await
    }

    pub async fn sample(&mut self) -> HostSample {
        let cpu = match self.read("stat").await.as_deref().and_then(parse_cpu_times) {
            Some(now) => {
                let percent = self.last_cpu.and_then(|before| cpu_percent(before, now));
                self.last_cpu = Some(now);
                percent
            }
            None => None,
        };
        HostSample {
            cpu_percent: cpu,
            memory: self
                .read("meminfo")
                .await
                .as_deref()
                .and_then(parse_meminfo),
            load: self
                .read("loadavg")
                .await
                .as_deref()
                .and_then(parse_loadavg),
            uptime_secs: self.read("uptime").await.as_deref().and_then(parse_uptime),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }
}

async fn read_small(path: &Path) -> Option<String> {
    tokio::fs::read_to_string(path).await.ok()
}

/// The host's name from `/proc/sys/kernel/hostname`, else `localhost`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The default agent id: `/etc/machine-id`, else the host name, reduced to the id alphabet.
pub fn default_agent_id() -> String {
    let raw = std::fs::read_to_string("/etc/machine-id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(hostname);
    let cleaned: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(pulse_domain::resource::limits::MAX_AGENT_ID_CHARS)
        .collect();
    if cleaned.is_empty() {
        "localhost".to_owned()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\nintr 1\n";
    const STAT_LATER: &str = "cpu  200 0 100 1100 100 0 0 0 0 0\n";

    #[test]
    fn cpu_percent_from_two_stat_samples() {
        let before = parse_cpu_times(STAT).unwrap();
        assert_eq!(
            before,
            CpuTimes {
                busy: 150,
                total: 1000
            }
        );
        let after = parse_cpu_times(STAT_LATER).unwrap();
        // 150 busy of 500 ticks.
        assert_eq!(cpu_percent(before, after), Some(30.0));
        assert_eq!(cpu_percent(after, before), None);
        assert_eq!(cpu_percent(before, before), None);
        assert!(parse_cpu_times("cpu0 1 2 3 4\n").is_none());
        assert!(parse_cpu_times("cpu  1 x 3 4\n").is_none());
    }

    #[test]
    fn meminfo_in_bytes() {
        let text = "MemTotal:       16000 kB\nMemFree:         1000 kB\nMemAvailable:    4000 kB\nBuffers: 10 kB\nSwapTotal: 2000 kB\nSwapFree: 500 kB\n";
        let mem = parse_meminfo(text).unwrap();
        assert_eq!(mem.total, 16000 * 1024);
        assert_eq!(mem.available, 4000 * 1024);
        assert_eq!(mem.swap_total - mem.swap_free, 1500 * 1024);
        let old_kernel = "MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 5 kB\nCached: 20 kB\n";
        assert_eq!(parse_meminfo(old_kernel).unwrap().available, 35 * 1024);
        assert!(parse_meminfo("garbage").is_none());
    }

    #[test]
    fn loadavg_and_uptime() {
        assert_eq!(
            parse_loadavg("0.52 0.58 0.59 1/467 12345\n"),
            Some([0.52, 0.58, 0.59])
        );
        assert_eq!(parse_loadavg("0.5\n"), None);
        assert_eq!(parse_uptime("350735.47 234388.90\n"), Some(350735.47));
        assert_eq!(parse_uptime(""), None);
    }

    #[test]
    fn host_metrics_names() {
        let sample = HostSample {
            cpu_percent: Some(12.0),
            memory: Some(Memory {
                total: 100,
                available: 25,
                swap_total: 0,
                swap_free: 0,
            }),
            load: Some([1.0, 2.0, 3.0]),
            uptime_secs: Some(5.0),
            cpus: 2,
        };
        let m = sample.metrics();
        assert_eq!(m["memory_percent"], 75.0);
        assert_eq!(m["load15"], 3.0);
        assert_eq!(m["cpu_percent"], 12.0);
    }

    #[tokio::test]
    async fn collector_reads_a_proc_fixture() {
        let root = std::env::temp_dir().join(format!("pulse-proc-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("stat"), STAT).unwrap();
        std::fs::write(
            root.join("meminfo"),
            "MemTotal: 10 kB\nMemAvailable: 5 kB\n",
        )
        .unwrap();
        std::fs::write(root.join("loadavg"), "1 2 3 1/1 1\n").unwrap();
        std::fs::write(root.join("uptime"), "7.5 1\n").unwrap();
        let mut collector = HostCollector::new(&root);
        assert_eq!(collector.sample().await.cpu_percent, None);
        std::fs::write(root.join("stat"), STAT_LATER).unwrap();
        let sample = collector.sample().await;
        assert_eq!(sample.cpu_percent, Some(30.0));
        assert_eq!(sample.uptime_secs, Some(7.5));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
