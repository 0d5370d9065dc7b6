//! `qbridge-bench`: prints frames/s and ns/frame for the in-memory forwarding cases.
//!
//! Timing mode (default) runs every combination of the selected cases, VLAN counts, MAC counts
//! and batch sizes. `--frames N` runs exactly N frames of one combination and prints nothing
//! but the count: that is the mode `scripts/bench-instructions.sh` runs under callgrind twice
//! (two values of N) to get instructions per frame without the setup.

use clap::Parser;
use qbridge_bench::{build, drive, run, Case, Params};
use qbridge_bridge::Outputs;
use qbridge_packet::Batch;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(version, about = "In-memory benchmark of the qbridge forwarding core")]
struct Args {
    /// Cases to run (default: all): access-to-trunk, customer-to-provider,
    /// provider-to-customer, trunk-to-trunk, broadcast-8.
    #[arg(long, value_delimiter = ',')]
    case: Vec<String>,
    /// VLAN counts configured on trunk ports.
    #[arg(long, value_delimiter = ',', default_values_t = [1u16, 4094])]
    vlans: Vec<u16>,
    /// Learned MAC addresses.
    #[arg(long, value_delimiter = ',', default_values_t = [1000u32, 1_000_000])]
    macs: Vec<u32>,
    /// Batch sizes.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 32, 256])]
    batch: Vec<usize>,
    /// Seconds measured per combination.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
    /// Run exactly this many frames of the first combination, untimed (for callgrind).
    #[arg(long)]
    frames: Option<u64>,
}

fn main() {
    let args = Args::parse();
    let cases: Vec<Case> = if args.case.is_empty() {
        Case::ALL.to_vec()
    } else {
        args.case
            .iter()
            .map(|c| {
                Case::from_name(c).unwrap_or_else(|| {
                    eprintln!("qbridge-bench: unknown case \"{c}\"");
                    std::process::exit(2)
                })
            })
            .collect()
    };
    if let Some(n) = args.frames {
        let p = Params {
            case: cases[0],
            vlans: args.vlans[0],
            macs: args.macs[0],
            batch: args.batch[0],
        };
        let mut s = build(p);
        let mut out = Outputs::new();
        let mut batch = Batch::with_capacity(p.batch);
        let (i, o) = drive(&mut s, &mut out, &mut batch, n);
        println!("{i} frames in, {o} out");
        return;
    }
    if !args.json {
        println!(
            "{:<22} {:>5} {:>8} {:>6} {:>12} {:>9} {:>10}",
            "case", "vlans", "macs", "batch", "Mframes/s", "ns/frame", "out/in"
        );
    }
    for &case in &cases {
        for &vlans in &args.vlans {
            for &macs in &args.macs {
                for &batch in &args.batch {
                    let p = Params {
                        case,
                        vlans,
                        macs,
                        batch,
                    };
                    let f = run(p, Duration::from_secs_f64(args.seconds));
                    if args.json {
                        println!("{}", serde_json::to_string(&f).expect("figures serialise"));
                    } else {
                        println!(
                            "{:<22} {:>5} {:>8} {:>6} {:>12.2} {:>9.1} {:>10.2}",
                            case.name(),
                            vlans,
                            macs,
                            batch,
                            f.frames_per_sec / 1e6,
                            f.ns_per_frame,
                            f.frames_out as f64 / f.frames_in as f64
                        );
                    }
                }
            }
        }
    }
}
