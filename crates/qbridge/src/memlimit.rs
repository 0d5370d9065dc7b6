//! How much memory the daemon may still use, from its memory cgroup, so a streamed batch is
//! refused before it is read rather than getting the process OOM-killed (issue 17, decision
//! 29).
//!
//! The process's cgroup comes from `/proc/self/cgroup`, the hierarchy's mount point from
//! `/proc/self/mountinfo` (cgroup v2: the `cgroup2` mount; v1: the `cgroup` mount with the
//! `memory` controller). From the process's cgroup up to the mount's root, each level with a
//! limit (v2 `memory.max`, v1 `memory.limit_in_bytes`) leaves `limit - usage` (v2
//! `memory.current`, v1 `memory.usage_in_bytes`); the headroom is the least of these. No
//! cgroup, no limit anywhere, or files that cannot be read: no bound (`None`).
//!
//! Cost: a handful of small file reads, once per streamed batch (never on the datapath).

use std::path::{Path, PathBuf};

/// The tightest memory limit over the process's cgroup and its ancestors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headroom {
    /// `limit - usage` at the tightest level, in bytes.
    pub bytes: u64,
    pub limit: u64,
    pub usage: u64,
    /// The limit's file, for messages.
    pub file: PathBuf,
}

/// v1 reports "no limit" as a page-rounded `i64::MAX`; anything this large is no limit.
const UNLIMITED_V1: u64 = 1 << 62;

/// The headroom of this process (paths under `/`).
pub fn headroom() -> Option<Headroom> {
    headroom_under(Path::new("/"))
}

/// [`headroom`] with every path taken under `root` (tests give a fake tree).
pub fn headroom_under(root: &Path) -> Option<Headroom> {
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    let cgroups = std::fs::read_to_string(under("proc/self/cgroup")).ok()?;
    let mountinfo = std::fs::read_to_string(under("proc/self/mountinfo")).ok()?;
    // v2 first (the unified hierarchy is what a v2 or hybrid system limits), then v1 memory.
    let v2 = cgroups.lines().find_map(|l| l.strip_prefix("0::"));
    let v1 = cgroups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        ctrls.split(',').any(|c| c == "memory").then_some(path)
    });
    let mounts: Vec<Mount> = mountinfo.lines().filter_map(Mount::parse).collect();
    let mut best: Option<Headroom> = None;
    let mut consider = |h: Option<Headroom>| {
        if let Some(h) = h {
            if best.as_ref().is_none_or(|b| h.bytes < b.bytes) {
                best = Some(h);
            }
        }
    };
    if let (Some(path), Some(m)) = (v2, mounts.iter().find(|m| m.fstype == "cgroup2")) {
        consider(walk(
            &under(&m.point),
            &m.root,
            path,
            "memory.max",
            "memory.current",
        ));
    }
    if let (Some(path), Some(m)) = (
        v1,
        mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "memory")),
    ) {
        consider(walk(
            &under(&m.point),
            &m.root,
            path,
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
        ));
    }
    best
}

/// From cgroup `path` (as `/proc/self/cgroup` names it) up to the mount's root: the least
/// `limit - usage`.
fn walk(point: &Path, mount_root: &str, path: &str, limit: &str, usage: &str) -> Option<Headroom> {
    // The part of the path below the mount's root (a container's namespace shows "/").
    let rel = path
        .strip_prefix(mount_root.trim_end_matches('/'))
        .unwrap_or(path)
        .trim_matches('/');
    let mut dir = point.to_path_buf();
    let mut levels = vec![dir.clone()];
    for part in rel.split('/').filter(|p| !p.is_empty() && *p != "..") {
        dir.push(part);
        levels.push(dir.clone());
    }
    let mut best: Option<Headroom> = None;
    for level in levels {
        let file = level.join(limit);
        let Some(lim) = read_limit(&file) else {
            continue;
        };
        let Some(used) = read_number(&level.join(usage)) else {
            continue;
        };
        let bytes = lim.saturating_sub(used);
        if best.as_ref().is_none_or(|b| bytes < b.bytes) {
            best = Some(Headroom {
                bytes,
                limit: lim,
                usage: used,
                file,
            });
        }
    }
    best
}

fn read_number(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// A limit file: `None` for no limit (`max`, v1's huge number) or no file.
fn read_limit(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|&n| n < UNLIMITED_V1)
}

/// One line of `/proc/self/mountinfo`, the fields used here.
#[derive(Debug)]
struct Mount {
    root: String,
    point: String,
    fstype: String,
    options: String,
}

impl Mount {
    fn parse(line: &str) -> Option<Mount> {
        let (left, right) = line.split_once(" - ")?;
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        Some(Mount {
            root: unescape(l.get(3)?),
            point: unescape(l.get(4)?),
            fstype: (*r.first()?).to_string(),
            options: (*r.get(2)?).to_string(),
        })
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\040` etc.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let n = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |n, d| n * 8 + u32::from(d - b'0'));
            out.push(n as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn fake(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("qbridge-memlimit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn v2_takes_the_tightest_level() {
        let r = fake("v2");
        write(&r, "proc/self/cgroup", "0::/system.slice/qbridge.service\n");
        write(
            &r,
            "proc/self/mountinfo",
            "22 27 0:21 / /proc rw - proc proc rw\n\
             30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
        );
        let cg = "sys/fs/cgroup";
        write(&r, &format!("{cg}/memory.current"), "5000000000\n"); // root: no memory.max
        write(&r, &format!("{cg}/system.slice/memory.max"), "max\n");
        write(
            &r,
            &format!("{cg}/system.slice/memory.current"),
            "900000000\n",
        );
        let svc = format!("{cg}/system.slice/qbridge.service");
        write(&r, &format!("{svc}/memory.max"), "104857600\n");
        write(&r, &format!("{svc}/memory.current"), "10000000\n");
        let h = headroom_under(&r).unwrap();
        assert_eq!(h.bytes, 104_857_600 - 10_000_000);
        assert_eq!(h.file, r.join(format!("{svc}/memory.max")));
        // A tighter parent wins.
        write(&r, &format!("{cg}/system.slice/memory.max"), "950000000\n");
        assert_eq!(headroom_under(&r).unwrap().bytes, 50_000_000);
        // No limit anywhere: no bound.
        write(&r, &format!("{cg}/system.slice/memory.max"), "max\n");
        write(&r, &format!("{svc}/memory.max"), "max\n");
        assert_eq!(headroom_under(&r), None);
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn v1_memory_controller_and_namespaced_paths() {
        let r = fake("v1");
        write(
            &r,
            "proc/self/cgroup",
            "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n",
        );
        write(
            &r,
            "proc/self/mountinfo",
            "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
             35 31 0:32 /process_api /sys/fs/cgroup/mem\\040ory rw,relatime - cgroup cgroup rw,memory\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
        );
        // The mount's root is /process_api: the process's cgroup is "abc" under the mount point.
        let m = "sys/fs/cgroup/mem ory";
        write(
            &r,
            &format!("{m}/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        write(&r, &format!("{m}/memory.usage_in_bytes"), "1\n");
        write(&r, &format!("{m}/abc/memory.limit_in_bytes"), "209715200\n");
        write(&r, &format!("{m}/abc/memory.usage_in_bytes"), "9715200\n");
        let h = headroom_under(&r).unwrap();
        assert_eq!(
            (h.bytes, h.limit, h.usage),
            (200_000_000, 209_715_200, 9_715_200)
        );
        // The unified hierarchy has no memory files here: v1 alone counts.
        std::fs::remove_dir_all(&r).unwrap();
        assert_eq!(headroom_under(&r), None);
    }
}
