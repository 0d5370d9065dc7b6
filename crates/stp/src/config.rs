//! Bridge configuration (802.1D-2004 17.13 parameters, their ranges and the timer
//! relation of 17.14), the protocol mode, the BPDU group address, the link a caller
//! reports, and the configuration errors, whose messages name the bad value.

use crate::port::Duplex;
use serde::Serialize;

/// Protocol version run by the bridge (stp_mode).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Legacy 802.1D: ForceVersion 0, Configuration and TCN BPDUs only.
    Stp,
    /// RSTP (802.1D-2004 clause 17), ForceVersion 2.
    Rstp,
    /// MSTP (802.1Q clause 13), ForceVersion 3. See the crate doc for what is implemented.
    Mstp,
}

/// Which group address BPDUs are sent to.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupAddress {
    /// 01:80:C2:00:00:00, customer (802.1Q) bridges.
    Customer,
    /// 01:80:C2:00:00:08, provider (802.1ad) bridges.
    Provider,
}

/// Bridge configuration (802.1D-2004 17.13 parameters).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BridgeConfig {
    /// Protocol version.
    pub mode: Mode,
    /// Bridge priority, a multiple of 4096 up to 61440.
    pub priority: u16,
    /// Hello Time, 1..=10 s.
    pub hello_time: u16,
    /// Max Age, 6..=40 s.
    pub max_age: u16,
    /// Forward Delay, 4..=30 s.
    pub forward_delay: u16,
    /// Transmit Hold Count, 1..=10.
    pub tx_hold_count: u16,
    /// MSTP MaxHops, 6..=40.
    pub max_hops: u8,
    /// BPDU destination.
    pub group_address: GroupAddress,
}

impl Default for BridgeConfig {
    /// The defaults of 802.1D-2004 table 17-1 and 802.1Q table 13-5.
    fn default() -> Self {
        BridgeConfig {
            mode: Mode::Rstp,
            priority: 32768,
            hello_time: 2,
            max_age: 20,
            forward_delay: 15,
            tx_hold_count: 6,
            max_hops: 20,
            group_address: GroupAddress::Customer,
        }
    }
}

/// Bad configuration. Messages name the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// priority not a multiple of 4096 in 0..=61440
    #[error("bridge priority {0} is not a multiple of 4096 in 0..61440")]
    BridgePriority(u16),
    /// port priority not a multiple of 16 in 0..=240
    #[error("port priority {0} is not a multiple of 16 in 0..240")]
    PortPriority(u16),
    /// timer out of range
    #[error("{name} {value} is out of range {min}..{max}")]
    Range {
        /// parameter
        name: &'static str,
        /// value given
        value: u32,
        /// lowest allowed
        min: u32,
        /// highest allowed
        max: u32,
    },
    /// 17.14: 2 * (Forward Delay - 1) >= Max Age >= 2 * (Hello Time + 1)
    #[error(
        "max age {max_age} must lie between 2*(hello time+1)={lo} and 2*(forward delay-1)={hi}"
    )]
    TimerRelation {
        /// Max Age given
        max_age: u16,
        /// 2 * (hello + 1)
        lo: u16,
        /// 2 * (forward delay - 1)
        hi: u16,
    },
    /// no such port
    #[error("no port {0}")]
    NoPort(u16),
    /// no such MSTI
    #[error("no MSTI {0} in the region's table")]
    NoTree(u16),
    /// port number out of 1..=4095 or already present
    #[error("port number {0} is taken or not in 1..4095")]
    PortNumber(u16),
}

pub(crate) fn range(name: &'static str, value: u32, min: u32, max: u32) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::Range {
            name,
            value,
            min,
            max,
        })
    }
}

impl BridgeConfig {
    /// Check every parameter and the timer relation of 17.14.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.priority % 4096 != 0 || self.priority > 61440 {
            return Err(ConfigError::BridgePriority(self.priority));
        }
        range("hello time", self.hello_time.into(), 1, 10)?;
        range("max age", self.max_age.into(), 6, 40)?;
        range("forward delay", self.forward_delay.into(), 4, 30)?;
        range("tx hold count", self.tx_hold_count.into(), 1, 10)?;
        range("max hops", self.max_hops.into(), 6, 40)?;
        let lo = 2 * (self.hello_time + 1);
        let hi = 2 * (self.forward_delay - 1);
        if self.max_age < lo || self.max_age > hi {
            return Err(ConfigError::TimerRelation {
                max_age: self.max_age,
                lo,
                hi,
            });
        }
        Ok(())
    }
}

/// A port's link as the caller sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Link {
    /// Up, with speed (Mb/s, 0 if unknown) and duplex.
    Up {
        /// Speed in Mb/s.
        speed_mbps: u32,
        /// Duplex.
        duplex: Duplex,
    },
    /// Down.
    Down,
}
