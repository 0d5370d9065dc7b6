// SPDX-License-Identifier: GPL-2.0
/* qbridge-blast's XDP program: run by the kernel's live-frames test run (BPF_PROG_TEST_RUN with
 * BPF_F_TEST_XDP_LIVE_FRAMES), once per copy of the test frame. XDP_TX sends the copy out of
 * the test run's interface; XDP_DROP recycles it unsent. With gap_ns set, a token bucket lets
 * one frame out per gap_ns and lets at most `burst` frames be owed after a pause (the test run
 * pauses between calls); the loop runs far faster than any rate asked, so the pacing is exact
 * to the test run's batch (64 copies, a few microseconds). One sending thread: no atomics. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

volatile const __u64 gap_ns = 0; /* 0: every copy goes out */
volatile const __u64 burst = 32;
/* vlans > 0: the frame carries an 802.1Q tag, and each copy's VID is the next of
 * vid_first .. vid_first + vlans - 1 in turn, its destination MAC's last two bytes the VID
 * (a page of the live-frames run keeps what the program wrote: each copy is rewritten). */
volatile const __u32 vlans = 0;
volatile const __u32 vid_first = 1;
/* random_vlans: each copy's VLAN drawn at random from the range instead (bpf_get_prandom_u32),
 * so the receiver's per-VLAN state is reached in no order a prefetcher could follow. */
volatile const __u32 random_vlans = 0;
/* The frame's addresses: written again into every copy, as the receiving kernel's untagging
 * (skb_vlan_untag) moves them in place on the page, which the pool then recycles. */
volatile const __u8 addrs[12] = {};
__u32 turn = 0;
__u64 next_ns = 0;

SEC("xdp")
int qb_blast(struct xdp_md *ctx)
{
	__u64 now, owed;

	if (vlans) {
		__u8 *d = (void *)(long)ctx->data;
		__u32 vid;

		if ((void *)(d + 16) > (void *)(long)ctx->data_end)
			return XDP_DROP;
		if (random_vlans) {
			vid = vid_first + bpf_get_prandom_u32() % vlans;
		} else {
			vid = vid_first + turn;
			turn = turn + 1 >= vlans ? 0 : turn + 1;
		}
#pragma unroll
		for (int i = 0; i < 12; i++)
			d[i] = addrs[i];
		d[4] = vid >> 8;
		d[5] = vid;
		d[12] = 0x81;
		d[13] = 0x00;
		d[14] = (vid >> 8) & 0x0f;
		d[15] = vid;
	}
	if (gap_ns == 0)
		return XDP_TX;
	now = bpf_ktime_get_ns();
	if (now < next_ns)
		return XDP_DROP;
	owed = burst * gap_ns;
	if (next_ns + owed < now)
		next_ns = now - owed;
	next_ns += gap_ns;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
