//! A private Open vSwitch for the namespace tests, as `scripts/bench-live.sh` runs it: its own
//! `ovsdb-server` and `ovs-vswitchd` inside one of the lab's namespaces, database, sockets, pid
//! and log files in a directory of the lab's; both stopped (by pid) and the directory removed
//! when the [`Ovs`] is dropped (the vswitchd log printed first if the test panicked).
//! [`ovs_bins`] installs `openvswitch-switch` with apt-get when it is missing (its system
//! service kept from starting); a test that cannot have it prints why and skips.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
/// Where the OVS programs are.
#[derive(Clone, Debug)]
pub struct OvsBins {
    pub vswitchd: PathBuf,
    pub ovsdb_server: PathBuf,
    pub vsctl: PathBuf,
    pub ovsdb_tool: PathBuf,
    pub schema: PathBuf,
}

/// A program on `$PATH` or in the sbin directories (`ovs-vswitchd` is in /usr/sbin).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    found
}

pub fn find_ovs() -> Option<OvsBins> {
    let schema = ["/usr/share/openvswitch/vswitch.ovsschema"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())?;
    Some(OvsBins {
        vswitchd: find_program("ovs-vswitchd")?,
        ovsdb_server: find_program("ovsdb-server")?,
        vsctl: find_program("ovs-vsctl")?,
        ovsdb_tool: find_program("ovsdb-tool")?,
        schema,
    })
}

/// Installs openvswitch-switch with apt-get, as scripts/bench-live.sh does: its postinst must
/// not start the system-wide service, so policy-rc.d says no (101) while it runs.
pub fn install_ovs() -> Result<(), String> {
    if find_program("apt-get").is_none() {
        return Err("apt-get is not available".into());
    }
    let policy = Path::new("/usr/sbin/policy-rc.d");
    let wrote_policy = !policy.exists()
        && std::fs::write(policy, "#!/bin/sh\nexit 101\n").is_ok()
        && Command::new("chmod")
            .args(["755", "/usr/sbin/policy-rc.d"])
            .status()
            .is_ok_and(|s| s.success());
    let apt = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("apt-get: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "apt-get {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    eprintln!("installing openvswitch-switch (apt-get)");
    let r = apt(&["update", "-qq"]).and_then(|()| {
        apt(&[
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "openvswitch-switch",
        ])
    });
    if wrote_policy {
        let _ = std::fs::remove_file(policy);
    }
    r
}

/// The OVS programs, installed if they are missing; `Err(reason)` if they cannot be had.
pub fn ovs_bins() -> Result<OvsBins, String> {
    if let Some(b) = find_ovs() {
        return Ok(b);
    }
    install_ovs().map_err(|e| format!("Open vSwitch is missing and cannot be installed: {e}"))?;
    find_ovs().ok_or_else(|| "Open vSwitch still missing after apt-get install".into())
}

/// A running private OVS: `ovsdb-server` and `ovs-vswitchd` in one namespace, all their
/// files in `dir`. Dropping it stops both (by pid) and removes `dir`.
pub struct Ovs {
    pub bins: OvsBins,
    pub dir: PathBuf,
    pub procs: Vec<Child>,
}

impl Ovs {
    /// Starts the database, sets `other_config` (read once by `ovs-vswitchd` at start), then
    /// the switch, inside `ns`.
    pub fn start(
        bins: OvsBins,
        ns: &str,
        dir: PathBuf,
        other_config: &[&str],
    ) -> Result<Ovs, String> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut ovs = Ovs {
            bins,
            dir,
            procs: Vec::new(),
        };
        let d = ovs.dir.clone();
        let db = d.join("conf.db");
        super::run(
            &ovs.bins.ovsdb_tool.to_string_lossy(),
            &[
                "create",
                &db.to_string_lossy(),
                &ovs.bins.schema.to_string_lossy(),
            ],
        )?;
        let server = ovs.bins.ovsdb_server.clone();
        ovs.spawn(
            ns,
            &server,
            &[
                db.to_string_lossy().into_owned(),
                format!("--remote=punix:{}", d.join("db.sock").display()),
                format!("--pidfile={}", d.join("ovsdb-server.pid").display()),
                format!("--unixctl={}", d.join("ovsdb-server.ctl").display()),
                format!("--log-file={}", d.join("ovsdb-server.log").display()),
                "--no-chdir".into(),
            ],
            "ovsdb-server",
        )?;
        ovs.wait_for(&d.join("db.sock"), "ovsdb-server")?;
        ovs.vsctl(&["--no-wait", "init"])?;
        let mut set = vec!["--no-wait", "set", "Open_vSwitch", "."];
        set.extend_from_slice(other_config);
        ovs.vsctl(&set)?;
        let vswitchd = ovs.bins.vswitchd.clone();
        ovs.spawn(
            ns,
            &vswitchd,
            &[
                format!("unix:{}", d.join("db.sock").display()),
                format!("--pidfile={}", d.join("ovs-vswitchd.pid").display()),
                format!("--unixctl={}", d.join("ovs-vswitchd.ctl").display()),
                format!("--log-file={}", d.join("ovs-vswitchd.log").display()),
                "--no-chdir".into(),
            ],
            "ovs-vswitchd",
        )?;
        ovs.wait_for(&d.join("ovs-vswitchd.ctl"), "ovs-vswitchd")?;
        Ok(ovs)
    }

    pub fn envs(&self) -> [(&'static str, &Path); 4] {
        let d = self.dir.as_path();
        [
            ("OVS_RUNDIR", d),
            ("OVS_DBDIR", d),
            ("OVS_LOGDIR", d),
            ("OVS_SYSCONFDIR", d),
        ]
    }

    pub fn spawn(
        &mut self,
        ns: &str,
        prog: &Path,
        args: &[String],
        what: &str,
    ) -> Result<(), String> {
        let err = std::fs::File::create(self.dir.join(format!("{what}.err")))
            .map_err(|e| e.to_string())?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(prog)
            .args(args)
            .envs(self.envs())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        self.procs.push(child);
        Ok(())
    }

    /// Waits up to 10 s for `sock` to appear, failing early if the last process exited.
    pub fn wait_for(&mut self, sock: &Path, what: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            let exited = self
                .procs
                .last_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                return Err(format!(
                    "{what} did not start ({}):\n{}\n{}",
                    exited.map_or("no socket after 10 s".into(), |s| s.to_string()),
                    self.file(&format!("{what}.err")),
                    self.file(&format!("{what}.log"))
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// `ovs-vsctl --db=unix:DIR/db.sock --timeout=10 ARGS…`
    pub fn vsctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(&self.bins.vsctl)
            .arg(format!("--db=unix:{}", self.dir.join("db.sock").display()))
            .arg("--timeout=10")
            .args(args)
            .envs(self.envs())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("ovs-vsctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ovs-vsctl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "----- ovs-vswitchd log -----\n{}",
                self.file("ovs-vswitchd.log")
            );
        }
        // ovs-vswitchd first, then its database.
        for child in self.procs.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Ovs {
    /// `ovs-appctl -t DIR/ovs-vswitchd.ctl ARGS…` (`rstp/show`, `lacp/show`, `bond/show` …).
    pub fn appctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(find_program("ovs-appctl").unwrap_or_else(|| "ovs-appctl".into()))
            .arg("-t")
            .arg(self.dir.join("ovs-vswitchd.ctl"))
            .args(args)
            .envs(self.envs())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("ovs-appctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ovs-appctl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
