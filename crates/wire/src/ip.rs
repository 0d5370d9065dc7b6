//! What IPv4 and IPv6 share: the protocol number space (`Protocol`, an open enum) and the
//! `enum_with_unknown!` helper other modules use for open number spaces.

/// Defines an enum over a number space where unlisted values stay representable as
/// `Unknown(n)`, with lossless `From` conversions both ways.
macro_rules! enum_with_unknown {
    (
        $(#[$meta:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this crate has no name for.
            Unknown($ty),
        }

        impl From<$ty> for $name {
            fn from(v: $ty) -> Self {
                match v {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for $ty {
            fn from(v: $name) -> $ty {
                match v {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}
pub(crate) use enum_with_unknown;

enum_with_unknown! {
    /// IP protocol / IPv6 next-header numbers (IANA "Assigned Internet Protocol Numbers").
    pub enum Protocol(u8) {
        /// IPv6 hop-by-hop options extension header.
        HopByHop = 0,
        Icmp = 1,
        Tcp = 6,
        Udp = 17,
        /// IPv6 routing extension header.
        Ipv6Route = 43,
        /// IPv6 fragment extension header.
        Ipv6Frag = 44,
        /// Authentication header (IPsec).
        Ah = 51,
        Icmpv6 = 58,
        /// IPv6 "no next header".
        Ipv6NoNxt = 59,
        /// IPv6 destination options extension header.
        Ipv6Opts = 60,
    }
}

impl core::fmt::Display for Protocol {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Protocol::Unknown(n) => write!(f, "protocol {n}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Reads a big-endian u16 at `at`; callers guarantee `at + 2 <= b.len()`.
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian u32 at `at`; callers guarantee `at + 4 <= b.len()`.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Most option bytes an IPv4 or TCP header holds: a 4-bit length field in 32-bit words, minus
/// the 20 fixed bytes.
pub const MAX_OPTIONS_LEN: usize = 40;

/// IPv4 or TCP option bytes, stored inline (no allocation) exactly as on the wire. The header
/// length is this length rounded up to 4; [`OptionBytes::padded_len`] gives it and emitters pad
/// with zero (End of Option List).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptionBytes {
    bytes: [u8; MAX_OPTIONS_LEN],
    len: u8,
}

impl Default for OptionBytes {
    fn default() -> Self {
        OptionBytes::EMPTY
    }
}

impl core::fmt::Debug for OptionBytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "OptionBytes({:02x?})", self.as_slice())
    }
}

impl OptionBytes {
    pub const EMPTY: OptionBytes = OptionBytes {
        bytes: [0; MAX_OPTIONS_LEN],
        len: 0,
    };

    /// Copies `b`; `Err(Malformed)` if longer than [`MAX_OPTIONS_LEN`].
    pub fn from_slice(b: &[u8]) -> crate::Result<OptionBytes> {
        if b.len() > MAX_OPTIONS_LEN {
            return Err(crate::Error::Malformed);
        }
        let mut o = OptionBytes::EMPTY;
        o.bytes[..b.len()].copy_from_slice(b);
        o.len = b.len() as u8;
        Ok(o)
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(MAX_OPTIONS_LEN)]
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the options take in a header: the length rounded up to a multiple of 4.
    pub fn padded_len(&self) -> usize {
        (self.len() + 3) & !3
    }

    /// Writes the options, then zero padding, into `out[..padded_len()]`. `out` must be at
    /// least that long; shorter `out` gets only what fits.
    pub(crate) fn write_padded(&self, out: &mut [u8]) {
        let n = self.padded_len().min(out.len());
        for (i, b) in out[..n].iter_mut().enumerate() {
            *b = self.as_slice().get(i).copied().unwrap_or(0);
        }
    }
}
