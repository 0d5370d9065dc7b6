//! Usage text of each object: the one source of `qbridge help`, `qbridge OBJECT help` and
//! the command list in `qbridge --help`, so that they cannot drift apart.

use crate::command::Object;

const LINK: &str = "  link add NAME type bridge [vlan_filtering 0|1] [vlan_protocol 802.1Q|802.1ad]
           [vlan_default_pvid N] [ageing_time SECONDS] [fdb_max_learned N]
           [group_fwd_mask N] [fdb_max_entries N] [learn_inner_vid on|off]
           [stp_state 0|1] [stp_mode stp|rstp|mstp] [priority N] [hello_time S]
           [max_age S] [forward_delay S] [tx_hold_count N] [max_hops N]
           [mst_name NAME] [mst_revision N]        (spanning tree; times in seconds)
  link set dev BR type bridge [same options as link add]
  link add NAME type bond [mode active-backup|balance-xor|802.3ad]
           [xmit_hash_policy layer2|layer2+vlan|layer3+4|inner-layer3+4]
           [lacp_rate slow|fast] [lacp_active on|off] [min_links N] [miimon MS]
           [lacp_fallback on|off] [address MAC]      (one port over its members)
  link set dev BOND type bond [same options as link add]
  link set dev PORT master BOND | nomaster   (an afpacket port joins or leaves a bond)
  link add NAME type pcap | type tap [ifname IF] [netns NS] | type patch peer NAME2
           | type afpacket dev IFNAME [qdisc_bypass on|off] [ring_frames N]
           | type afxdp dev IFNAME [queues N] [mode native|skb] [zerocopy on|off]
           | type vxlan id VNI|external [vnifilter] local ADDR [remote ADDR] [dev UNDERLAY]
             [dstport PORT] [ttl N] [tos T|inherit] [[no]udp6zerocsumtx]
             [[no]udp6zerocsumrx] [learning on|off]
             (ADDR IPv4 or IPv6, one family per port; remote: the first flood-list VTEP;
              external: each VLAN's VNI from vlan … tunnel_info)
  link add link LOWER name NAME type vlan [protocol 802.1Q|802.1ad|0xHHHH] id VID
           [netns NS] [address MAC]       (a VLAN device: a TAP NAME; LOWER: a port,
                                           a VLAN device, or a bridge = its host port)
  link add link LOWER name NAME type macvlan mode private|vepa|bridge|passthru
           [netns NS] [address MAC]
  link set dev BR up|down [ifname IF] [netns NS] [address MAC]   (the bridge's own TAP)
  link set dev NAME [master BR | nomaster] [up | down] [learning on|off] [flood on|off]
           [mcast_flood on|off] [bcast_flood on|off] [isolated on|off] [hairpin on|off]
           [mtu N] [envhdr len N|auto] [tpid 0xHHHH|default] [fdb_max_learned N]
  link set dev NAME vlan_mode access|trunk|native-untagged|native-tagged|dot1q-tunnel
           [tag V] [trunks LIST] [cvlans LIST]      (LIST: 10,20-30; cvlans may hold 0)
  link set dev NAME pcp_mode keep|copy|fixed N|map FROM:TO,… [default_pcp N]
  link set dev NAME locked on|off [mab on|off]      (port security, as Linux's bridge)
  link set dev NAME [cost N|auto] [priority N] [guard on|off] [root_block on|off]
           [bpdu_filter on|off] [loop_guard on|off] [edge on|off] [auto_edge on|off]
           [p2p yes|no|auto]    (spanning tree: guard = BPDU guard, root_block = root guard)
  link del dev NAME
  link show [dev NAME]    (-d: a bond's LACP state per member; -br: one line per link:
                          name, state, master, VLANs)
";

const VLAN: &str =
    "  vlan add vid V[-V2] dev NAME [pvid] [untagged] [self]   (self: a bridge's host port)
  vlan del vid V[-V2] dev NAME [self]
  vlan set vid V[-V2] dev NAME [pvlan promiscuous|isolated|community N|none]
           [fdb_max_learned N [violation protect|restrict|shutdown]] [self]
  vlan map add dev NAME vid A translate B    (A on NAME's wire is VLAN B inside, both ways)
  vlan map add dev NAME cvid C[-C2] svid S   (selective Q-in-Q: those C-VLANs into S-VLAN S)
  vlan map add dev NAME svid S cvid C translate V        (2:1: S-tag S + C-tag C are VLAN V)
  vlan map add dev NAME svid S cvid C translate S2 C2    (2:2: both tags rewritten, both ways)
  vlan map del dev NAME vid A | cvid C[-C2] | svid S cvid C   vlan map show [dev NAME]
  vlan show [dev NAME] [vid V]      (-c: runs of VIDs as ranges; -s: counters per bridge;
                                    -br: one line per port)
  vlan add vid V[-V2] dev VXLAN tunnel_info id VNI[-VNI2]   (an external vxlan port: VLAN V
           leaves in VNI, untagged inside; VNI enters as VLAN V; V must be tagged on VXLAN)
  vlan del vid V[-V2] dev VXLAN tunnel_info [id VNI[-VNI2]]   vlan tunnelshow [dev VXLAN]
";

const FDB: &str =
    "  fdb add|replace MAC dev NAME [vlan V] [static|dynamic|permanent] [sticky] [extern_learn]
  fdb del MAC dev NAME [vlan V]
  fdb add|append|replace|del MAC dev VXLAN dst IP [vni VNI] [extern_learn]   (a vxlan
           port's remote VTEPs, per VNI, IP of the port's local family; MAC 00:00:00:00:00:00: the VNI's flood list,
           head-end replication; vni: required on an external port; src_vni is the same
           word; extern_learn: a control plane's, e.g. qbridge-evpn)
  fdb show [br BR] [dev NAME] [vlan V]
  fdb flush dev NAME [vlan V] [[no]permanent] [[no]static] [[no]dynamic] [[no]sticky]
            [[no]added_by_user] [[no]extern_learn]  (default: dynamic and static, not permanent)
";

const MIRROR: &str =
    "  mirror add NAME src PORT[,PORT...] [direction rx|tx|both] [vid LIST] dst PORT|pcap FILE
           [rspan VID]      (copies of the frames as they passed; dst pcap: a file name in
                            the daemon's --pcap-dir, or replay's --out)
  mirror del NAME
  mirror show [NAME]       (-s: copies sent and dropped; -j: JSON)
";

const STP: &str =
    "  stp show [dev BR]        (root, roles, states, BPDU counters, topology changes; -j)
  stp msti set dev BR vid V[-V2] msti M        (MSTP region: the VLANs of MSTI M; 0: CIST)
  stp msti priority dev BR msti M priority P   (the bridge's priority in MSTI M)
  stp msti port dev PORT msti M [priority P] [cost C|auto]   (a port's, in MSTI M)
";

const VNI: &str = "  vni add|del dev VXLAN vni N[-M]   (the VNIs a vnifilter vxlan port accepts)
  vni show [dev VXLAN]
";

const SHOW: &str =
    "  show running-config      (the whole configuration as a batch file that recreates it)
  show fast-path           (the eBPF fast path: state, ports, flows, hits, misses by reason)
  monitor [link|fdb|vlan|mirror|stp|drops|all]...  (changes as they happen, as 'bridge monitor';
           drops: each dropped frame; all: every one but drops; -j: JSON lines)
  trace dev PORT src MAC dst MAC [vlan VID [pcp N] [dei 0|1] [tpid T]]...
           [ethertype 0xHHHH | arp SENDER TARGET | ipv4 SRC DST | ipv6 SRC DST]
           [tcp SPORT DPORT | udp SPORT DPORT] [len N]
  trace dev PORT hex HHHH... | pcap FILE [index N]
           (a frame entering PORT walked through the running configuration, every
            decision explained, the frames that would leave each port, or the drop and
            its reason; nothing is sent or learned; -j: JSON)
  trace live dev PORT [count N] [timeout SECONDS] [src MAC] [dst MAC] [vlan VID]...
           [ethertype 0xHHHH | arp | ipv4 | ipv6] [tcp | udp] [port N]
           (the next N frames PORT receives that match, each explained as it is forwarded,
            fast-path hits included; a daemon's; ends after N frames or the timeout)
";

const NOTES: &str = "\
'dev' may be omitted where iproute2 allows it (link set p1 learning off). Words may be
abbreviated where iproute2 allows it: 'qbridge l s p1 le off' is 'link set p1 learning off',
'qbridge f sh' is 'fdb show'.
'link add NAME index N …' (and 'peer NAME2 index M') picks the port id, as ip-link(8) does.
";

/// The commands of one object.
fn commands_of(o: Object) -> &'static str {
    match o {
        Object::Link => LINK,
        Object::Vlan => VLAN,
        Object::Fdb => FDB,
        Object::Mirror => MIRROR,
        Object::Stp => STP,
        Object::Vni => VNI,
    }
}

/// Every object's commands and the notes on `dev` and abbreviations (the body of
/// `qbridge --help`).
pub fn commands() -> String {
    format!("{LINK}{VLAN}{FDB}{MIRROR}{STP}{VNI}{SHOW}{NOTES}")
}

/// `qbridge OBJECT help`.
pub fn object(o: Object) -> String {
    format!(
        "Usage: qbridge [OPTIONS] {} COMMAND [ARGS...]\n{}{NOTES}",
        o.name(),
        commands_of(o)
    )
}

/// `help` in a batch or sent to the daemon: `qbridge [OPTIONS] OBJECT COMMAND` and the
/// commands of every object.
pub fn all() -> String {
    format!(
        "Usage: qbridge [OPTIONS] OBJECT COMMAND [ARGS...]\nwhere OBJECT := {{ link | vlan | \
         fdb | mirror | stp | vni | show | monitor | trace | help }}\n{}",
        commands()
    )
}
