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
__u64 next_ns = 0;

SEC("xdp")
int qb_blast(struct xdp_md *ctx)
{
	__u64 now, owed;

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
