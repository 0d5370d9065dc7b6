//! Bridge-level protocol variables that the engine's fields hold and the machines' files
//! (`select.rs`, `trees.rs`) drive: the Port Role Selection state, and an MSTI's bridge-level
//! variables while the tree is out of context. Here, below both, so that the engine need not
//! import the files that extend it (imports run one way: those files import the engine).

use crate::types::{BridgeId, PortId, PriorityVector, Times};

/// PRS states (802.1D-2004 17.28).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Prs {
    InitBridge,
    RoleSelection,
}

/// The bridge-level variables of one MSTI while it is not in context.
#[derive(Clone, Debug)]
pub(crate) struct TreeBridge {
    pub bridge_id: BridgeId,
    pub root_priority: PriorityVector,
    pub root_port_id: Option<PortId>,
    pub root_times: Times,
    pub root_hops: u8,
    pub prs: Prs,
    pub tree_begin: bool,
}
