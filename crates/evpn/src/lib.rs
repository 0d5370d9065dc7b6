//! qbridge-evpn's pieces, shared by the adapter (`src/main.rs`) and its benchmark
//! (`src/bin/bench.rs`, `scripts/bench-evpn.sh`): the daemon's control socket, gobgpd's API,
//! the decision and the route encoding (docs/evpn.md).

pub mod daemon;
pub mod gobgp;
pub mod mirror;
pub mod reconcile;
pub mod route;
pub mod typed;
