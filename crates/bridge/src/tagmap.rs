//! Two-tag VLAN maps of one port (`vlan map add dev P svid S cvid C translate …`): 2:1 (an
//! S-tag and a C-tag on the wire are one VLAN inside the bridge) and 2:2 (both tags rewritten).
//!
//! Keys and values pack two VIDs into a `u32` as `a << 12 | b`. Both directions are sorted
//! arrays searched by bisection: the maps of one port are few and read far more often than
//! changed (every change builds new arrays, copy-on-write, as every other compiled table).

use serde::Serialize;

/// One two-tag map as configured: the tags on the wire, and what they are inside the bridge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TagMap {
    /// The outer tag's VID on the wire (the port's bridge TPID).
    pub svid: u16,
    /// The VID of the C-tag (0x8100) right behind it.
    pub cvid: u16,
    /// The VLAN inside the bridge (2:1), or its bridge tag's VID (2:2).
    pub vid: u16,
    /// 2:2: the inner C-tag's VID inside the bridge; `None`: 2:1 (no inner tag inside).
    pub inner: Option<u16>,
}

/// What a two-tag map does to a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InnerTag {
    /// 2:1 on ingress: the C-tag goes (the frame is in VLAN `vid` with one tag).
    Pop,
    /// 2:2 on ingress, or on egress: the C-tag's VID becomes this one.
    Set(u16),
    /// 2:1 on egress: a C-tag with this VID goes behind the bridge tag.
    Push(u16),
}

/// The two-tag maps of a port, compiled for both directions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TagMaps {
    /// The maps as configured, by (svid, cvid).
    pub maps: Vec<TagMap>,
    /// (svid << 12 | cvid) → index in `maps`, sorted by key.
    by_wire: Vec<(u32, u16)>,
    /// (vid << 12 | inner, or 0 for 2:1) → index in `maps`, sorted by key.
    by_inside: Vec<(u32, u16)>,
}

fn pack(a: u16, b: u16) -> u32 {
    u32::from(a & 0x0fff) << 12 | u32::from(b & 0x0fff)
}

fn find(t: &[(u32, u16)], key: u32) -> Option<u16> {
    t.binary_search_by_key(&key, |e| e.0).ok().map(|i| t[i].1)
}

impl TagMap {
    fn wire_key(&self) -> u32 {
        pack(self.svid, self.cvid)
    }

    fn inside_key(&self) -> u32 {
        pack(self.vid, self.inner.unwrap_or(0))
    }
}

impl TagMaps {
    pub fn from_maps(mut maps: Vec<TagMap>) -> TagMaps {
        maps.sort_unstable();
        let mut by_wire: Vec<(u32, u16)> = maps
            .iter()
            .enumerate()
            .map(|(i, m)| (m.wire_key(), i as u16))
            .collect();
        let mut by_inside: Vec<(u32, u16)> = maps
            .iter()
            .enumerate()
            .map(|(i, m)| (m.inside_key(), i as u16))
            .collect();
        by_wire.sort_unstable();
        by_inside.sort_unstable();
        TagMaps {
            maps,
            by_wire,
            by_inside,
        }
    }

    /// The map of the wire tags (`svid`, `cvid`).
    pub fn by_wire(&self, svid: u16, cvid: u16) -> Option<&TagMap> {
        find(&self.by_wire, pack(svid, cvid)).map(|i| &self.maps[usize::from(i)])
    }

    /// The 2:2 map into (`vid`, `inner`), or with `inner` 0 the 2:1 map into `vid`.
    pub fn by_inside(&self, vid: u16, inner: u16) -> Option<&TagMap> {
        find(&self.by_inside, pack(vid, inner)).map(|i| &self.maps[usize::from(i)])
    }

    /// Ingress: the frame's outer VID `svid` and inner C-VID `cvid` (the C-tag right behind
    /// the outer tag) → the VID inside and what to do to the C-tag.
    pub fn ingress(&self, svid: u16, cvid: u16) -> Option<(u16, InnerTag)> {
        self.by_wire(svid, cvid).map(|m| match m.inner {
            None => (m.vid, InnerTag::Pop),
            Some(c2) => (m.vid, InnerTag::Set(c2)),
        })
    }

    /// Egress of a frame of VLAN `vid` whose C-tag behind the bridge tag has VID `inner`
    /// (`None`: no C-tag there) → the outer VID on the wire and what to do to the C-tag. A 2:2
    /// map of (`vid`, `inner`) comes first, then a 2:1 map of `vid`.
    pub fn egress(&self, vid: u16, inner: Option<u16>) -> Option<(u16, InnerTag)> {
        if let Some(m) = inner
            .filter(|&c| c != 0)
            .and_then(|c| self.by_inside(vid, c))
        {
            return Some((m.svid, InnerTag::Set(m.cvid)));
        }
        self.by_inside(vid, 0)
            .filter(|m| m.inner.is_none())
            .map(|m| (m.svid, InnerTag::Push(m.cvid)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions() {
        let t = TagMaps::from_maps(vec![
            TagMap {
                svid: 100,
                cvid: 10,
                vid: 500,
                inner: None,
            },
            TagMap {
                svid: 100,
                cvid: 11,
                vid: 200,
                inner: Some(21),
            },
        ]);
        assert_eq!(t.ingress(100, 10), Some((500, InnerTag::Pop)));
        assert_eq!(t.ingress(100, 11), Some((200, InnerTag::Set(21))));
        assert_eq!(t.ingress(100, 12), None);
        assert_eq!(t.ingress(101, 10), None);
        assert_eq!(t.egress(500, None), Some((100, InnerTag::Push(10))));
        assert_eq!(t.egress(500, Some(7)), Some((100, InnerTag::Push(10))));
        assert_eq!(t.egress(200, Some(21)), Some((100, InnerTag::Set(11))));
        assert_eq!(t.egress(200, Some(22)), None);
        assert_eq!(t.egress(200, None), None);
    }
}
