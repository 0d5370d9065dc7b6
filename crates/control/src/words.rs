//! Keyword matching as iproute2 does it, and "did you mean" for the words it cannot match.
//!
//! iproute2 compares most words with `matches(arg, "word")` (lib/utils.c): `arg` may be any
//! non-empty prefix of `word`, and where several words share a prefix the first test in the
//! if-chain wins (`ip link s` is `set`, not `show`). Other words it compares with `strcmp`:
//! those must be typed whole (`bridge fdb flush`, `mtu`, `vid`). Each table here lists a
//! context's words with the shortest abbreviation iproute2 resolves to that word
//! ([`Kw::min`]), taken from the if-chain of the iproute2 function named at the table; words
//! iproute2 compares with `strcmp`, and qbridge's own words, have `min` = their length.
//!
//! Where a context mixes the words of two iproute2 chains (`link set` takes `ip link`'s and
//! `type bridge_slave`'s words at once), a prefix that matches a word of each is an error
//! naming both (`m`: `master` or `mcast_flood`): iproute2 has no order between them.

/// A keyword and the length of its shortest accepted abbreviation.
#[derive(Debug, Clone, Copy)]
pub struct Kw {
    pub word: &'static str,
    pub min: usize,
}

/// A keyword iproute2 accepts abbreviated down to `min` characters.
pub const fn kw(word: &'static str, min: usize) -> Kw {
    Kw { word, min }
}

/// A keyword that must be typed whole.
pub const fn exact(word: &'static str) -> Kw {
    Kw {
        word,
        min: word.len(),
    }
}

/// What a word is in a context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(&'static str),
    /// A prefix of two or more words with no order between them.
    Ambiguous(Vec<&'static str>),
    /// No keyword; the nearest one, if one is near.
    Unknown(Option<&'static str>),
}

/// Resolves `word` in `table`: the word itself, else the one word it abbreviates.
pub fn lookup(word: &str, table: &[Kw]) -> Lookup {
    if let Some(k) = table.iter().find(|k| k.word == word) {
        return Lookup::Found(k.word);
    }
    let found: Vec<&'static str> = table
        .iter()
        .filter(|k| !word.is_empty() && word.len() >= k.min && k.word.starts_with(word))
        .map(|k| k.word)
        .collect();
    match found.len() {
        0 => Lookup::Unknown(suggest(word, table.iter().map(|k| k.word))),
        1 => Lookup::Found(found[0]),
        _ => Lookup::Ambiguous(found),
    }
}

/// The candidate nearest to `word` (restricted Damerau-Levenshtein distance: a swap of two
/// neighbours counts one), if it is within 1 edit for words of up to 4 characters and 2 for
/// longer ones.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = if word.chars().count() <= 4 { 1 } else { 2 };
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// `a`, `a or b`, `a, b or c`.
pub fn or_list(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

// ----- the tables -----

/// Objects: bridge/bridge.c `cmds[]` (link, fdb, mdb, mst, vlan, vni, monitor, help) and
/// ip/ip.c `cmds[]` (`ip l` is link).
pub const OBJECTS: &[Kw] = &[
    kw("link", 1),
    kw("vlan", 1),
    kw("fdb", 1),
    kw("help", 1),
    exact("show"),
    kw("mirror", 2),
    kw("stp", 2),
    kw("vni", 2),
    exact("trace"),
];

/// `link` commands: ip/iplink.c `do_iplink` (add, set, change, replace, delete, show, lst,
/// list, …, help): `s` is set, `sh` show, `l` lst (= show).
pub const LINK_COMMANDS: &[Kw] = &[
    kw("add", 1),
    kw("set", 1),
    kw("delete", 1),
    kw("show", 2),
    kw("lst", 1),
    kw("list", 2),
    kw("help", 1),
];

/// `vlan` commands: bridge/vlan.c `do_vlan` (add, delete, show, lst, list, tunnelshow, set,
/// global, help): `s` is show.
pub const VLAN_COMMANDS: &[Kw] = &[
    kw("add", 1),
    kw("delete", 1),
    kw("show", 1),
    kw("lst", 1),
    kw("list", 2),
    kw("set", 2),
    kw("map", 1),
    kw("tunnelshow", 1),
    kw("help", 1),
];

/// `vlan map` commands (qbridge's).
pub const VLAN_MAP_COMMANDS: &[Kw] = &[kw("add", 1), kw("del", 1), kw("show", 1)];

/// `vlan map add|del|show` options.
pub const VLAN_MAP: &[Kw] = &[
    exact("dev"),
    exact("vid"),
    exact("translate"),
    exact("cvid"),
    exact("svid"),
];

/// `vlan set` options: qbridge's (iproute2's `vlan set` takes other options).
pub const VLAN_SET: &[Kw] = &[
    exact("vid"),
    exact("dev"),
    exact("pvlan"),
    exact("fdb_max_learned"),
    exact("violation"),
    exact("self"),
];

/// `fdb` commands: bridge/fdb.c `do_fdb` (add, append, replace, delete, get, show, lst, list,
/// help; `flush` by strcmp).
pub const FDB_COMMANDS: &[Kw] = &[
    kw("add", 1),
    kw("append", 2),
    kw("replace", 1),
    kw("delete", 1),
    kw("show", 1),
    kw("lst", 1),
    kw("list", 2),
    exact("flush"),
    kw("help", 1),
];

/// `link add` before `type`: ip/iplink.c `iplink_parse` (`link` by matches, `t` is
/// txqueuelen, so `type` from `ty`; `name`, `dev` by strcmp).
pub const LINK_ADD: &[Kw] = &[
    kw("link", 1),
    exact("name"),
    kw("type", 2),
    exact("dev"),
    exact("index"),
];

/// Options of `link add|set … type bond`: ip/iplink_bond.c's words qbridge has, whole (the
/// kernel's `matches` would take prefixes; bond words share long prefixes), and qbridge's
/// `lacp_fallback`.
pub const BOND_OPTIONS: &[Kw] = &[
    exact("mode"),
    exact("xmit_hash_policy"),
    exact("lacp_rate"),
    exact("lacp_active"),
    exact("min_links"),
    exact("miimon"),
    exact("lacp_fallback"),
    exact("address"),
];

/// `link set` before the options: only `type` (from `ty`, as in `iplink_parse`).
pub const LINK_SET_TYPE: &[Kw] = &[kw("type", 2)];

/// Options of `link add|set … type bridge`: ip/iplink_bridge.c `bridge_parse_opt`
/// (ageing_time, vlan_filtering, vlan_protocol, group_fwd_mask, vlan_default_pvid by matches,
/// fdb_max_learned by strcmp); fdb_max_entries is qbridge's.
pub const BRIDGE_OPTIONS: &[Kw] = &[
    kw("vlan_filtering", 1),
    kw("vlan_protocol", 6),
    kw("vlan_default_pvid", 6),
    kw("ageing_time", 1),
    exact("fdb_max_learned"),
    kw("group_fwd_mask", 1),
    exact("fdb_max_entries"),
    exact("learn_inner_vid"),
    // ip/iplink_bridge.c: stp_state, priority, hello_time, max_age, forward_delay by matches
    // (taken whole here: qbridge takes seconds where iproute2 takes centiseconds); the rest
    // is qbridge's (mstpctl's settings).
    exact("stp_state"),
    exact("stp_mode"),
    exact("priority"),
    exact("hello_time"),
    exact("max_age"),
    exact("forward_delay"),
    exact("tx_hold_count"),
    exact("max_hops"),
    exact("mst_name"),
    exact("mst_revision"),
];

/// Options of `link set dev PORT`: ip/iplink.c `iplink_parse` (master, nomaster, address by
/// matches; up, down, mtu, netns by strcmp) and ip/iplink_bridge_slave.c
/// `bridge_slave_parse_opt` (hairpin, learning, flood — `f` is fdb_flush —, mcast_flood,
/// bcast_flood, isolated, all by matches); envhdr, tpid, fdb_max_learned and ifname are
/// qbridge's.
pub const PORT_OPTIONS: &[Kw] = &[
    kw("master", 1),
    kw("nomaster", 1),
    exact("up"),
    exact("down"),
    kw("learning", 1),
    kw("flood", 2),
    kw("mcast_flood", 1),
    kw("bcast_flood", 1),
    kw("isolated", 1),
    kw("hairpin", 1),
    exact("mtu"),
    exact("envhdr"),
    exact("tpid"),
    exact("fdb_max_learned"),
    exact("ifname"),
    exact("netns"),
    kw("address", 1),
    exact("index"),
    exact("vlan_mode"),
    exact("tag"),
    exact("trunks"),
    exact("cvlans"),
    exact("pcp_mode"),
    exact("default_pcp"),
    // bridge/link.c `bridge link set`: locked and mab by strcmp.
    exact("locked"),
    exact("mab"),
    // bridge/link.c: cost, priority, guard, root_block; mstpctl: edge, auto_edge, p2p,
    // bpdu_filter; loop_guard is qbridge's.
    exact("cost"),
    exact("priority"),
    exact("guard"),
    exact("root_block"),
    exact("bpdu_filter"),
    exact("loop_guard"),
    exact("edge"),
    exact("auto_edge"),
    exact("p2p"),
];

/// `… type vlan` options: ip/iplink_vlan.c `vlan_parse_opt` (protocol, id by matches) and
/// `iplink_parse`'s address (matches) and netns (strcmp).
pub const VLAN_DEVICE_OPTIONS: &[Kw] = &[
    kw("protocol", 1),
    kw("id", 1),
    exact("netns"),
    kw("address", 1),
];

/// `… type macvlan` options: ip/iplink_macvlan.c `macvlan_parse_opt` (mode by matches).
pub const MACVLAN_OPTIONS: &[Kw] = &[kw("mode", 1), exact("netns"), kw("address", 1)];

/// `vlan add|del`: bridge/vlan.c `vlan_modify` compares every word with strcmp.
pub const VLAN_ADD: &[Kw] = &[
    exact("vid"),
    exact("dev"),
    exact("pvid"),
    exact("untagged"),
    exact("self"),
    exact("master"),
    exact("tunnel_info"),
];
pub const VLAN_DEL: &[Kw] = &[
    exact("vid"),
    exact("dev"),
    exact("self"),
    exact("master"),
    exact("tunnel_info"),
];

/// `vlan tunnelshow`: bridge/vlan.c `vlan_show` (dev by strcmp).
pub const VLAN_TUNNELSHOW: &[Kw] = &[exact("dev")];

/// `vlan show`: bridge/vlan.c `vlan_show` (dev, vid by strcmp).
pub const VLAN_SHOW: &[Kw] = &[exact("dev"), exact("vid")];

/// `fdb add|replace|del`: bridge/fdb.c `fdb_modify` (dev by strcmp; master, local,
/// permanent, static, dynamic, vlan, sticky by matches — `s` and `st` are static).
pub const FDB_ADD: &[Kw] = &[
    exact("dev"),
    kw("vlan", 1),
    exact("inner_vlan"),
    kw("static", 1),
    kw("dynamic", 1),
    kw("permanent", 1),
    kw("local", 1),
    kw("sticky", 3),
    kw("master", 1),
    kw("extern_learn", 1),
    exact("self"),
    exact("dst"),
    exact("vni"),
    exact("src_vni"),
];

/// `fdb show`: bridge/fdb.c `fdb_show` (br, brport, dev, vlan by strcmp).
pub const FDB_SHOW: &[Kw] = &[exact("br"), exact("dev"), exact("brport"), exact("vlan")];

/// `fdb flush`: bridge/fdb.c `fdb_flush` compares every word with strcmp.
pub const FDB_FLUSH: &[Kw] = &[
    exact("dev"),
    exact("vlan"),
    exact("master"),
    exact("self"),
    exact("permanent"),
    exact("nopermanent"),
    exact("static"),
    exact("nostatic"),
    exact("dynamic"),
    exact("nodynamic"),
    exact("sticky"),
    exact("nosticky"),
    exact("added_by_user"),
    exact("noadded_by_user"),
    exact("extern_learn"),
    exact("noextern_learn"),
];

/// `fdb flush` words of bridge-fdb(8) that qbridge has nothing to match with.
pub const FDB_FLUSH_UNSUPPORTED: &[&str] = &[
    "brport",
    "src_vni",
    "nhid",
    "vni",
    "port",
    "dst",
    "offloaded",
    "nooffloaded",
    "router",
    "norouter",
];

/// Objects `help OBJECT` names: the objects with commands (qbridge's own `mirror` needs
/// `mi`: iproute2's `bridge m` is `mdb`).
pub const HELP_OBJECTS: &[Kw] = &[
    kw("link", 1),
    kw("vlan", 1),
    kw("fdb", 1),
    kw("mirror", 2),
    kw("stp", 2),
    kw("vni", 2),
];

/// `vni` commands: bridge/vni.c `do_vni` (add, delete, show, lst, list, help by matches).
pub const VNI_COMMANDS: &[Kw] = &[
    kw("add", 1),
    kw("delete", 1),
    kw("show", 1),
    kw("lst", 1),
    kw("list", 2),
    kw("help", 1),
];

/// `vni add|del|show` options: bridge/vni.c `vni_modify`, `vni_show` (strcmp).
pub const VNI_OPTIONS: &[Kw] = &[exact("dev"), exact("vni")];

/// `stp` commands (qbridge's own object, in the manner of mstpctl's show words).
pub const STP_COMMANDS: &[Kw] = &[kw("show", 1), kw("msti", 1), kw("help", 1)];

/// `stp msti set|priority` keywords.
pub const STP_MSTI: &[Kw] = &[
    exact("dev"),
    exact("vid"),
    exact("msti"),
    exact("priority"),
    exact("cost"),
];

/// `mirror` commands (qbridge's own object, in the manner of `bridge vlan`'s: `s` is show).
pub const MIRROR_COMMANDS: &[Kw] = &[
    kw("add", 1),
    kw("delete", 1),
    kw("show", 1),
    kw("list", 2),
    kw("help", 1),
];

/// `mirror add` keywords (qbridge's own: typed whole, `dir` for `direction`).
pub const MIRROR_ADD: &[Kw] = &[
    exact("src"),
    kw("direction", 3),
    exact("vid"),
    exact("dst"),
    exact("rspan"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_resolve_as_iproute2() {
        assert_eq!(lookup("l", OBJECTS), Lookup::Found("link"));
        assert_eq!(lookup("f", OBJECTS), Lookup::Found("fdb"));
        assert_eq!(lookup("s", LINK_COMMANDS), Lookup::Found("set"));
        assert_eq!(lookup("sh", LINK_COMMANDS), Lookup::Found("show"));
        assert_eq!(lookup("del", LINK_COMMANDS), Lookup::Found("delete"));
        assert_eq!(lookup("s", VLAN_COMMANDS), Lookup::Found("show"));
        assert_eq!(lookup("f", FDB_COMMANDS), Lookup::Unknown(None));
        assert_eq!(lookup("flus", FDB_COMMANDS), Lookup::Unknown(Some("flush")));
        assert_eq!(
            lookup("showx", LINK_COMMANDS),
            Lookup::Unknown(Some("show"))
        );
        assert_eq!(lookup("", OBJECTS), Lookup::Unknown(None));
        assert_eq!(lookup("st", FDB_ADD), Lookup::Found("static"));
        assert_eq!(lookup("sti", FDB_ADD), Lookup::Found("sticky"));
        assert_eq!(lookup("fl", PORT_OPTIONS), Lookup::Found("flood"));
        assert_eq!(
            lookup("m", PORT_OPTIONS),
            Lookup::Ambiguous(vec!["master", "mcast_flood"])
        );
        assert_eq!(lookup("mt", PORT_OPTIONS), Lookup::Unknown(Some("mtu")));
        assert_eq!(
            lookup("vlan_p", BRIDGE_OPTIONS),
            Lookup::Found("vlan_protocol")
        );
        assert_eq!(
            lookup("vlan_", BRIDGE_OPTIONS),
            Lookup::Found("vlan_filtering")
        );
    }

    #[test]
    fn suggestions() {
        assert_eq!(suggest("shwo", ["show", "set"]), Some("show"));
        assert_eq!(
            suggest("vlan_filtring", BRIDGE_OPTIONS.iter().map(|k| k.word)),
            Some("vlan_filtering")
        );
        assert_eq!(suggest("xyz", ["show", "set"]), None);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(or_list(&["a", "b", "c"]), "a, b or c");
    }
}
