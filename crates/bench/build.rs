//! Compiles `bpf/blast.c` (qbridge-blast's pacing XDP program) with clang (`$CLANG`, else
//! `clang`), as crates/fastpath does its program. Without clang the crate still builds and
//! qbridge-blast says why it cannot run.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("blast.o");
    println!("cargo:rerun-if-changed=bpf/blast.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rustc-check-cfg=cfg(qb_blast_missing)");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => other,
    };
    let result = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", "bpf/blast.c", "-o"])
        .arg(&out)
        .output();
    let why = match result {
        Ok(o) if o.status.success() => return,
        Ok(o) => format!(
            "{clang} failed on bpf/blast.c: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("cannot run {clang} ({e})"),
    };
    println!(
        "cargo:warning=qbridge-blast built without its XDP program: {}",
        why.lines().next().unwrap_or("")
    );
    println!("cargo:rustc-cfg=qb_blast_missing");
    std::fs::write(&out, b"").expect("write an empty object");
}
