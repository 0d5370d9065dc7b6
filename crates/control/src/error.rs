//! Errors of the control plane. Each message names the bad input and, for a grammar error, what
//! was expected instead; batch errors carry the line number in front.

use qbridge_bridge::ConfigError;
use qbridge_wire::mac::ParseMacError;

/// Why a command was refused. The session is unchanged after any of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// A spanning-tree setting the engine refused, or one that does not apply.
    #[error("{0}")]
    Stp(String),
    /// A bond command refused (the message names the bond, the port and why).
    #[error("{0}")]
    Bond(String),
    /// A VXLAN port or remote-VTEP command refused (the message names the port and why).
    #[error("{0}")]
    Vxlan(String),
    /// A command only a running daemon can run (`trace live`).
    #[error("{0}")]
    NeedsDaemon(String),
    /// A line with an object but no command, or nothing at all where a command was needed.
    #[error("missing command after \"{object}\" (expected {expected})")]
    MissingCommand {
        object: &'static str,
        expected: &'static str,
    },
    /// `hint`: `did you mean "link"?` for a near miss, else the objects there are.
    #[error("unknown object \"{word}\" ({hint})")]
    UnknownObject { word: String, hint: String },
    /// `hint`: `did you mean "show"?` for a near miss, else the commands there are.
    #[error("unknown command \"{word}\" for {object} ({hint})")]
    UnknownCommand {
        object: &'static str,
        word: String,
        hint: String,
    },
    /// A word with a control character (an escape sequence, a NUL): no name, value or
    /// keyword has one, and echoing it would reach a terminal as a command. `word` is shown
    /// with its control characters escaped (`\u{1b}`).
    #[error("word \"{word}\" holds a control character (names and values are printable text)")]
    ControlCharacter { word: String },
    /// A word the grammar does not allow at this point.
    #[error("unexpected \"{word}\" (expected {expected})")]
    Unexpected { word: String, expected: String },
    /// A keyword typed nearly right.
    #[error("unexpected \"{word}\" (did you mean \"{suggestion}\"?)")]
    NearMiss {
        word: String,
        suggestion: &'static str,
    },
    /// An abbreviation of two keywords iproute2 puts in no order.
    #[error("ambiguous \"{word}\" (could be {candidates})")]
    Ambiguous { word: String, candidates: String },
    /// An iproute2 word qbridge has nothing to apply to.
    #[error("\"{word}\" is not supported by qbridge ({why})")]
    NotSupported { word: String, why: &'static str },
    /// Two words that together select nothing (`fdb flush … static dynamic`).
    #[error("\"{word}\" contradicts \"{earlier}\": together they select no entries")]
    Contradicts { word: String, earlier: String },
    /// A number beyond what its keyword allows, reported as typed.
    #[error("{what} {value} is out of range ({range})")]
    OutOfRange {
        what: &'static str,
        value: String,
        range: &'static str,
    },
    /// A keyword that needs a value came last.
    #[error("\"{keyword}\" needs a value ({expected})")]
    MissingValue {
        keyword: String,
        expected: &'static str,
    },
    /// A required argument is absent.
    #[error("missing {what}")]
    MissingArgument { what: &'static str },
    #[error("invalid {what} \"{value}\" (expected {expected})")]
    BadValue {
        what: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("\"{0}\" given twice")]
    Duplicate(String),
    #[error("patch port \"{0}\" cannot be its own peer")]
    PatchSelfPeer(String),
    #[error(transparent)]
    BadMac(#[from] ParseMacError),
    #[error("bridge \"{0}\" has no host port (\"link set dev {0} up\" gives it one)")]
    NoHostPort(String),
    #[error("\"{0}\" is a bridge: its own VLANs need \"self\" (vlan add vid V dev {0} self)")]
    BridgeNeedsSelf(String),
    #[error("\"self\" applies to a bridge's host port; \"{0}\" is a port (omit \"self\")")]
    SelfOnPort(String),
    #[error("{0} only apply to a bridge's host port (link set dev BR up …)")]
    HostOnlyOptions(&'static str),
    #[error(
        "the host port of \"{0}\" exists: its ifname, netns, address and index are fixed at creation"
    )]
    HostPortFixed(String),
    #[error("\"master\" does not apply to bridge \"{0}\"'s host port")]
    HostPortMaster(String),
    /// A second port on a host interface (or TAP name) another port already uses: every
    /// frame would be received twice.
    #[error(
        "{what} \"{ifname}\"{ns} is already used by port \"{port}\" (a device can be a port once)"
    )]
    InterfaceTaken {
        what: &'static str,
        ifname: String,
        ns: String,
        port: String,
    },
    /// `qbridge apply`: a device exists with another kind or backend than the file asks for.
    #[error("\"{name}\" exists as {have}, not {want}: delete it first (link del dev {name})")]
    ExistsDifferent {
        name: String,
        have: String,
        want: String,
    },
    #[error("tag, trunks and cvlans go with vlan_mode (link set dev P vlan_mode access tag 10)")]
    VlanModeWords,
    /// The switch refused the command.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An error in line `line` (1-based) of a batch.
    /// The message includes the inner error's, so it is not also reported as a `source`
    /// (error chains would print it twice).
    #[error("line {line}: {error}")]
    Line {
        line: usize,
        error: Box<ControlError>,
    },
    /// `qbridge apply`: a mirror session exists with another configuration than the file's.
    #[error("mirror \"{name}\" exists as \"{have}\", not \"{want}\": delete it first (mirror del {name})")]
    MirrorExistsDifferent {
        name: String,
        have: String,
        want: String,
    },
}

impl ControlError {
    /// The error without its `line N:` wrapper.
    pub fn root(&self) -> &ControlError {
        match self {
            ControlError::Line { error, .. } => error.root(),
            e => e,
        }
    }

    /// The batch line the error is in, if it came from a batch.
    pub fn line(&self) -> Option<usize> {
        match self {
            ControlError::Line { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// `s` with its control characters escaped (`\u{1b}`), the rest as it is.
pub fn escape_controls(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
