//! 48-bit IEEE MAC addresses.

use core::fmt;
use core::str::FromStr;

/// An Ethernet MAC address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// Reads an address from the first six bytes of `bytes`. Panics if shorter: callers pass
    /// slices already validated by a frame view.
    pub fn from_bytes(bytes: &[u8]) -> MacAddr {
        let mut a = [0u8; 6];
        a.copy_from_slice(&bytes[..6]);
        MacAddr(a)
    }

    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Group (multicast or broadcast) address: the I/G bit is set.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    pub const fn is_broadcast(&self) -> bool {
        let a = self.0;
        a[0] == 0xff && a[1] == 0xff && a[2] == 0xff && a[3] == 0xff && a[4] == 0xff && a[5] == 0xff
    }

    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    pub const fn is_zero(&self) -> bool {
        let a = self.0;
        a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0 && a[4] == 0 && a[5] == 0
    }

    /// IEEE 802.1D reserved link-local group 01-80-C2-00-00-0X; returns X.
    pub const fn link_local_group(&self) -> Option<u8> {
        let a = self.0;
        if a[0] == 0x01
            && a[1] == 0x80
            && a[2] == 0xc2
            && a[3] == 0
            && a[4] == 0
            && a[5] & 0xf0 == 0
        {
            Some(a[5])
        } else {
            None
        }
    }

    /// The address as the low 48 bits of a u64 (network byte order, first byte most significant).
    pub const fn to_u64(&self) -> u64 {
        let a = self.0;
        ((a[0] as u64) << 40)
            | ((a[1] as u64) << 32)
            | ((a[2] as u64) << 24)
            | ((a[3] as u64) << 16)
            | ((a[4] as u64) << 8)
            | (a[5] as u64)
    }

    pub const fn from_u64(v: u64) -> MacAddr {
        MacAddr([
            (v >> 40) as u8,
            (v >> 32) as u8,
            (v >> 24) as u8,
            (v >> 16) as u8,
            (v >> 8) as u8,
            v as u8,
        ])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            a[0], a[1], a[2], a[3], a[4], a[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a MAC address string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseMacError(pub String);

impl fmt::Display for ParseMacError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid MAC address \"{}\" (expected six hex bytes like 02:00:00:00:00:01)",
            self.0
        )
    }
}

impl std::error::Error for ParseMacError {}

impl FromStr for MacAddr {
    type Err = ParseMacError;

    /// Accepts `aa:bb:cc:dd:ee:ff` and `aa-bb-cc-dd-ee-ff`, either case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseMacError(s.to_string());
        let sep = if s.contains('-') { '-' } else { ':' };
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split(sep) {
            if n == 6 || part.is_empty() || part.len() > 2 {
                return Err(err());
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| err())?;
            n += 1;
        }
        if n != 6 {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for MacAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for MacAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let m: MacAddr = "02:AB:cd:00:00:01".parse().unwrap();
        assert_eq!(m.0, [0x02, 0xab, 0xcd, 0, 0, 1]);
        assert_eq!(m.to_string(), "02:ab:cd:00:00:01");
        assert_eq!("02-ab-cd-00-00-01".parse::<MacAddr>().unwrap(), m);
        for bad in [
            "",
            "02:ab",
            "02:ab:cd:00:00:01:02",
            "zz:00:00:00:00:00",
            "002:0:0:0:0:0",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn classes() {
        assert!(MacAddr::BROADCAST.is_broadcast() && MacAddr::BROADCAST.is_multicast());
        assert!(MacAddr::ZERO.is_zero() && MacAddr::ZERO.is_unicast());
        let stp = MacAddr([0x01, 0x80, 0xc2, 0, 0, 0]);
        assert_eq!(stp.link_local_group(), Some(0));
        assert_eq!(
            MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x10]).link_local_group(),
            None
        );
        let m = MacAddr([1, 2, 3, 4, 5, 6]);
        assert_eq!(MacAddr::from_u64(m.to_u64()), m);
    }
}
