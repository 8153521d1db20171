// SPDX-License-Identifier: GPL-2.0
/* Quick-Start router (RFC 4782 §3.2), tc egress of one interface: the Target algorithm
 * of Allman, Floyd and Sarolahti (Figure 7).
 *
 * The interface's own egress traffic is measured in intervals of s (interval_ns); the
 * utilisation is the peak over the last N intervals (the current one counted as far as
 * it has got) or, with method STL_QS_EWMA, a moving average updated once per interval.
 * recent_qs_approvals is the sum of the rates approved in the last `approval_intervals`
 * intervals, the current one included. A request passing through is then
 *   util_bw = utilisation + recent_qs_approvals;
 *   util_bw < qs_thresh x capacity: approve min(request, qs_thresh x capacity - util_bw),
 *     rounded down to a rate code; QS TTL - 1; a lower code re-randomises the nonce
 *     fields of the skipped steps (RFC 4782 §3.4);
 *   otherwise reject: rate 0 (all fields at or below the old code re-randomised).
 * A grant of code 0 after rounding is a rejection too. Other packets are only counted.
 *
 * One load of this object per interface: its array map (one entry) holds that
 * interface's configuration, state and counters, pinned for the loader to read.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "stl_common.h"
#include "stl_qs_pkt.h"

#define NSEC_PER_SEC 1000000000ULL

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stl_qs_router);
} stl_qs_rtr SEC(".maps");

static __always_inline __u64 slot_bps(struct stl_qs_router *st, __u64 epoch)
{
	return st->bytes[epoch % STL_QS_SLOTS] * 8 * NSEC_PER_SEC / st->interval_ns;
}

/* Move to interval `epoch`: fold finished intervals into the moving average and clear
 * the slots the new intervals reuse. Called with the lock held. */
static __always_inline void roll(struct stl_qs_router *st, __u64 epoch)
{
	__u64 gap;
	__u32 w = st->ewma_permille;

	if (epoch <= st->epoch)
		return;
	gap = st->epoch ? epoch - st->epoch : STL_QS_SLOTS;
	for (__u32 i = 1; i <= STL_QS_SLOTS; i++) {
		__u64 done_bps = 0, slot;

		if (i > gap)
			break;
		if (i == 1 && st->epoch)
			done_bps = slot_bps(st, st->epoch);
		st->ewma_bps = (w * done_bps + (1000 - w) * st->ewma_bps) / 1000;
		slot = (st->epoch + i) % STL_QS_SLOTS;
		st->bytes[slot] = 0;
		st->approved_bps[slot] = 0;
	}
	if (gap > STL_QS_SLOTS) {
		for (__u32 i = 0; i < STL_QS_SLOTS; i++) {
			st->bytes[i] = 0;
			st->approved_bps[i] = 0;
		}
	}
	st->epoch = epoch;
}

static __always_inline __u64 utilisation(struct stl_qs_router *st, __u64 epoch)
{
	__u64 peak = slot_bps(st, epoch), v;

	if (st->method == STL_QS_EWMA)
		return st->ewma_bps > peak ? st->ewma_bps : peak;
	for (__u32 i = 1; i < STL_QS_SLOTS; i++) {
		if (i > st->n_intervals || i > epoch)
			break;
		v = slot_bps(st, epoch - i);
		if (v > peak)
			peak = v;
	}
	return peak;
}

static __always_inline __u64 recent_approvals(struct stl_qs_router *st, __u64 epoch)
{
	__u64 sum = 0;

	for (__u32 i = 0; i < STL_QS_SLOTS; i++) {
		if (i >= st->approval_intervals || i > epoch)
			break;
		sum += st->approved_bps[(epoch - i) % STL_QS_SLOTS];
	}
	return sum;
}

SEC("tc")
int stl_qs_router(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	__u32 zero = 0, old_code, code = 0, nonce, mask, rnd;
	__u64 now, epoch, util, recent, limit, request, grant = 0;
	struct stl_qs_router *st;
	__u8 *opt = NULL;
	int off;

	st = bpf_map_lookup_elem(&stl_qs_rtr, &zero);
	if (!st || !st->interval_ns || !st->capacity_bps)
		return TC_ACT_OK;
	if ((void *)(ip + 1) <= end && eth->h_proto == bpf_htons(ETH_P_IP) && ip->ihl > 5) {
		off = qs_find(ip, end);
		if (off >= 0) {
			opt = (__u8 *)(ip + 1) + off;
			if ((void *)(opt + STL_QS_LEN) > end || (opt[2] >> 4) != 0)
				opt = NULL;        /* a report of approved rate: nothing to decide */
		}
	}
	now = bpf_ktime_get_ns();
	rnd = bpf_get_prandom_u32();
	epoch = now / st->interval_ns;
	old_code = opt ? opt[2] & 15 : 0;
	request = qs_code_bps(old_code);

	bpf_spin_lock(&st->lock);
	roll(st, epoch);
	st->bytes[epoch % STL_QS_SLOTS] += skb->len;
	if (opt) {
		util = utilisation(st, epoch);
		recent = recent_approvals(st, epoch);
		limit = st->capacity_bps * st->thresh_permille / 1000;
		st->last_util_bps = util;
		st->requests++;
		if (util + recent < limit && request) {
			grant = limit - util - recent;
			if (grant > request)
				grant = request;
			code = qs_bps_code(grant);
		}
		if (code) {
			st->approved_bps[epoch % STL_QS_SLOTS] += qs_code_bps(code);
			st->granted_bps += qs_code_bps(code);
			if (code == old_code)
				st->approved++;
			else
				st->reduced++;
		} else {
			st->rejected++;
		}
	}
	bpf_spin_unlock(&st->lock);

	if (!opt)
		return TC_ACT_OK;
	if (code != old_code) {
		/* the nonce fields of the steps old_code -> ... -> code get fresh bits */
		mask = ((1u << (2 * old_code)) - 1) & ~((1u << (2 * code)) - 1);
		nonce = qs_nonce(opt);
		nonce = (nonce & ~mask) | (rnd & mask);
		qs_set_nonce(opt, nonce);
		opt[2] = code;                   /* function 0, the new rate */
	}
	if (code)
		opt[3] -= 1;                     /* QS TTL: approved by one more router */
	ip_csum_fix(ip, end);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
