//! Compiles `bpf/fastpath.c` into a BPF object with clang (`$CLANG`, else `clang`), embedded
//! by `src/lib.rs`. Without clang the crate still builds: the object is empty, loading says
//! why, and the daemon runs without the fast path (`--fast-path auto`). Set
//! `QBRIDGE_FASTPATH_REQUIRE=1` to make a missing or failing clang a build error (the test
//! command and the demo do, where clang is installed). A build without the program runs this
//! script again when clang or libbpf's headers appear (it watches the `PATH` directories and
//! `/usr/include` then), so installing clang afterwards is enough: no `cargo clean`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("fastpath.o");
    println!("cargo:rerun-if-changed=bpf/fastpath.c");
    println!("cargo:rerun-if-changed=bpf/fastpath.h");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=QBRIDGE_FASTPATH_REQUIRE");
    println!("cargo:rustc-check-cfg=cfg(qb_fastpath_missing)");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // Debian keeps asm/types.h under the multiarch include directory, which a BPF target
    // does not search by itself.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => other,
    };
    let result = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", "bpf/fastpath.c", "-o"])
        .arg(&out)
        .output();
    let why = match result {
        Ok(o) if o.status.success() => return,
        Ok(o) => format!(
            "{clang} failed on bpf/fastpath.c:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!(
            "cannot run {clang} ({e}); install clang (Debian: apt-get install clang libbpf-dev)"
        ),
    };
    // Built without the program, the build script must run again once clang (or libbpf's
    // headers) is installed, not only when the C files or `CLANG` change: cargo reruns it
    // when an entry of a watched directory changes, so the directories of `PATH` and the
    // include directory are watched while the program is missing (decision 65).
    println!("cargo:rerun-if-env-changed=PATH");
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path).filter(|d| d.is_dir()) {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
    }
    if !std::path::Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        println!("cargo:rerun-if-changed=/usr/include");
    }
    if std::env::var_os("QBRIDGE_FASTPATH_REQUIRE").is_some_and(|v| v == "1") {
        panic!("the fast path's BPF program does not build: {why}");
    }
    println!(
        "cargo:warning=building without the eBPF fast path: {}",
        why.lines().next().unwrap_or("")
    );
    println!("cargo:rustc-cfg=qb_fastpath_missing");
    std::fs::write(&out, b"").expect("write an empty object");
}
