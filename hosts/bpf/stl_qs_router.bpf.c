// SPDX-License-Identifier: GPL-2.0
/* Quick-Start router (RFC 4782 §3.2), tc egress of one interface: the Target algorithm
 * of Allman, Floyd and Sarolahti (Figure 7), Basic or Extreme (their §6.2).
 *
 * The interface's own egress traffic is measured in intervals of s (interval_ns); the
 * utilisation is the peak over the last N intervals (the current one counted as far as
 * it has got) or, with method STL_QS_EWMA, a moving average updated once per interval.
 * A request passing through is then
 *   util_bw = utilisation + approvals;
 *   util_bw < qs_thresh x capacity: approve min(request, qs_thresh x capacity - util_bw),
 *     rounded down to a rate code; QS TTL - 1; a lower code re-randomises the nonce
 *     fields of the skipped steps (RFC 4782 §3.4);
 *   otherwise reject: rate 0 (all fields at or below the old code re-randomised).
 * A grant of code 0 after rounding is a rejection too. Other packets are only counted.
 *
 * approvals, Basic Quick-Start: recent_qs_approvals, the sum of the rates approved in the
 *   last `approval_intervals` intervals of approval_interval_ns (s unless set apart: the
 *   paper's Fig. 11 sums two intervals of 1.5 s), the current one included. Reports of
 *   Approved Rate are counted and otherwise ignored (RFC 4782 §3.3.1: a router MAY).
 * approvals, Extreme Quick-Start: per-flow state of the approved requests (stl_qs_approvals).
 *   A flow's approval counts in full until its first packet after the approval reaches
 *   this router, then less by the bytes that arrive in its Quick-Start phase (rate -
 *   arrived x 8 / RTT: those bytes are in the utilisation already), and nothing once the
 *   phase, one RTT from that first packet, is over, or once the server closes the flow
 *   (its FIN: what it did not use returns to the pool). An approval whose flow sends nothing
 *   lapses after 2 RTTs, or after the recent-approvals window while the RTT is unknown
 *   (a SYN-ACK's approval: its RTT is known at the handshake's ACK). A Report of Approved
 *   Rate below the rate approved here (a downstream router reduced or denied it, or the
 *   sender's checks failed) lowers the approval to the reported rate: the rest returns to
 *   the pool. The RTT is the flow's handshake seen from here (stl_qs_router_rtt on the same
 *   interface's ingress: from the client's SYN to its first ACK), which the paper assumes
 *   a router knows. What the approvals promise is kept by when it lapses, in buckets of
 *   16 ms, so that a request sums 64 numbers, not every flow.
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

/* Extreme: the handshake of each flow through this interface, SYN time then RTT. */
struct stl_qs_rtt {
	__u64 t_syn;
	__u64 rtt_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct stl_qs_key);
	__type(value, struct stl_qs_rtt);
} stl_qs_rtts SEC(".maps");

/* Extreme: the approvals, by flow. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct stl_qs_key);
	__type(value, struct stl_qs_flow);
} stl_qs_approvals SEC(".maps");

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
	/* no early exit from these loops: every path leaves them alike, which keeps the
	 * verifier's count of states down */
	for (__u32 i = 1; i <= STL_QS_SLOTS; i++) {
		__u64 done_bps = 0;

		if (i > gap)
			continue;
		if (i == 1 && st->epoch)
			done_bps = slot_bps(st, st->epoch);
		st->ewma_bps = (w * done_bps + (1000 - w) * st->ewma_bps) / 1000;
		st->bytes[(st->epoch + i) % STL_QS_SLOTS] = 0;
	}
	if (gap > STL_QS_SLOTS) {
		for (__u32 i = 0; i < STL_QS_SLOTS; i++)
			st->bytes[i] = 0;
	}
	st->epoch = epoch;
}

/* The same for the approval intervals (Basic's recent_qs_approvals). */
static __always_inline void roll_approvals(struct stl_qs_router *st, __u64 aepoch)
{
	__u64 gap;

	if (aepoch <= st->aepoch)
		return;
	gap = st->aepoch ? aepoch - st->aepoch : STL_QS_SLOTS;
	for (__u32 i = 1; i <= STL_QS_SLOTS; i++) {
		if (i > gap)
			continue;
		st->approved_bps[(st->aepoch + i) % STL_QS_SLOTS] = 0;
	}
	if (gap > STL_QS_SLOTS) {
		for (__u32 i = 0; i < STL_QS_SLOTS; i++)
			st->approved_bps[i] = 0;
	}
	st->aepoch = aepoch;
}

static __always_inline __u64 utilisation(struct stl_qs_router *st, __u64 epoch)
{
	__u64 peak = slot_bps(st, epoch), v;

	if (st->method == STL_QS_EWMA)
		return st->ewma_bps > peak ? st->ewma_bps : peak;
	for (__u32 i = 1; i < STL_QS_SLOTS; i++) {
		if (i > st->n_intervals || i > epoch)
			continue;
		v = slot_bps(st, epoch - i);
		if (v > peak)
			peak = v;
	}
	return peak;
}

static __always_inline __u64 recent_approvals(struct stl_qs_router *st, __u64 aepoch)
{
	__u64 sum = 0;

	for (__u32 i = 0; i < STL_QS_SLOTS; i++) {
		if (i >= st->approval_intervals || i > aepoch)
			continue;
		sum += st->approved_bps[(aepoch - i) % STL_QS_SLOTS];
	}
	return sum;
}

/* Extreme: add `bps` to what lapses with bucket `b` (kept within the 64 ahead of now);
 * returns the bucket it went to. Lock held. */
static __always_inline __u64 promise_add(struct stl_qs_router *st, __u64 b, __u64 bps, __u64 now)
{
	__u64 first = now / STL_QS_BUCKET_NS;
	__u32 k;

	if (b < first)
		b = first;
	if (b > first + STL_QS_BUCKETS - 1)
		b = first + STL_QS_BUCKETS - 1;
	k = b % STL_QS_BUCKETS;
	if (st->promise_bucket[k] != b) {
		st->promise_bucket[k] = b;
		st->promise_bps[k] = 0;
	}
	st->promise_bps[k] += bps;
	return b;
}

/* Extreme: take `bps` back from bucket `b`, unless it has lapsed already. Lock held. */
static __always_inline void promise_sub(struct stl_qs_router *st, __u64 b, __u64 bps)
{
	__u32 k = b % STL_QS_BUCKETS;

	if (st->promise_bucket[k] != b)
		return;
	st->promise_bps[k] = st->promise_bps[k] > bps ? st->promise_bps[k] - bps : 0;
}

/* Extreme: what the approvals promise now. Lock held. */
static __always_inline __u64 promised(struct stl_qs_router *st, __u64 now)
{
	__u64 first = now / STL_QS_BUCKET_NS, sum = 0;

	for (__u32 k = 0; k < STL_QS_BUCKETS; k++) {
		if (st->promise_bucket[k] >= first)
			sum += st->promise_bps[k];
	}
	return sum;
}

static __always_inline __u64 approval_window_ns(struct stl_qs_router *st)
{
	return st->approval_interval_ns * st->approval_intervals;
}

/* Where the packet's Quick-Start option starts, from the packet's first byte, or -1. The
 * option parser and the rewrite below are functions of their own (global, not inlined):
 * the verifier checks each once, not once for every path through the rest. */
__attribute__((noinline)) int qs_option_at(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	int off;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl <= 5)
		return -1;
	off = qs_find(ip, end);
	return off < 0 ? -1 : ETH_HLEN + 20 + off;
}

/* The router's answer to the request at `at`: the rate lowered to `code` (the nonce fields
 * of the skipped steps old code -> ... -> code get fresh bits from `rnd`, RFC 4782 §3.4),
 * the QS TTL one less if approved, and the header checksum recomputed. */
__attribute__((noinline)) int qs_answer(struct __sk_buff *skb, __u32 at, __u32 code, __u32 rnd)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	__u32 old_code, nonce, mask;
	__u8 *opt;

	if (at < ETH_HLEN + 20 || at > ETH_HLEN + 52 || (void *)(ip + 1) > end)
		return -1;
	asm volatile("%[a] &= 0x7f" : [a] "+r"(at));   /* bounded where the verifier sees it */
	opt = data + at;
	if ((void *)(opt + STL_QS_LEN) > end)
		return -1;
	old_code = opt[2] & 15;
	code &= 15;
	if (code != old_code) {
		mask = ((1u << (2 * old_code)) - 1) & ~((1u << (2 * code)) - 1);
		nonce = qs_nonce(opt);
		nonce = (nonce & ~mask) | (rnd & mask);
		qs_set_nonce(opt, nonce);
		opt[2] = code;                   /* function 0, the new rate */
	}
	if (code)
		opt[3] -= 1;                     /* QS TTL: approved by one more router */
	return ip_csum_fix(ip, end);
}

/* The router's state. The steps below are global functions, each taking the lock for
 * itself: the verifier checks each once, where one function holding all of them would
 * multiply their paths past its limit. */
static __always_inline struct stl_qs_router *router(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stl_qs_rtr, &zero);
}

/* Count a packet of `len` bytes in the current interval (and a report, if it carries one). */
__attribute__((noinline)) int qs_measure(__u32 len, int report)
{
	struct stl_qs_router *st = router();
	__u64 now = bpf_ktime_get_ns(), epoch, aepoch;

	if (!st || !st->interval_ns || !st->approval_interval_ns)
		return 0;
	epoch = now / st->interval_ns;
	aepoch = now / st->approval_interval_ns;
	bpf_spin_lock(&st->lock);
	roll(st, epoch);
	roll_approvals(st, aepoch);
	st->bytes[epoch % STL_QS_SLOTS] += len;
	if (report >= 0)
		st->reports++;
	bpf_spin_unlock(&st->lock);
	return 0;
}

/* Extreme: a packet of an approved flow `f` that is not a request (`report`: a Report's
 * code, or -1; `fin`: the server closes, so what the flow has not used returns). */
__attribute__((noinline)) int qs_track(struct stl_qs_flow *f, __u64 rtt_ns, __u32 len, int report, int fin)
{
	struct stl_qs_router *st = router();
	__u64 now = bpf_ktime_get_ns(), rate, cut, used;

	if (!st || !f)
		return 0;
	bpf_spin_lock(&st->lock);
	if (!f->rtt_ns)
		f->rtt_ns = rtt_ns;
	if (report >= 0) {
		rate = qs_code_bps(report);
		if (rate < f->rate_bps) {
			/* reduced or denied downstream: what it still promises shrinks alike */
			cut = f->left_bps - f->left_bps * rate / f->rate_bps;
			promise_sub(st, f->bucket, cut);
			f->left_bps -= cut;
			st->reports_lower++;
			st->returned_bps += f->rate_bps - rate;
			f->rate_bps = rate;
		}
	}
	if (!f->t_first) {
		/* its Quick-Start phase begins: the promise now lapses one RTT from here */
		f->t_first = now;
		st->tracked_used++;
		promise_sub(st, f->bucket, f->left_bps);
		f->bucket = promise_add(st, (now + (f->rtt_ns ? f->rtt_ns : approval_window_ns(st))) /
					    STL_QS_BUCKET_NS, f->left_bps, now);
	}
	if (f->rtt_ns && now - f->t_first < f->rtt_ns) {
		f->arrived += len;
		st->phase_bytes += len;
		used = (__u64)len * 8 * NSEC_PER_SEC / f->rtt_ns;
		if (used > f->left_bps)
			used = f->left_bps;
		promise_sub(st, f->bucket, used);
		f->left_bps -= used;
	}
	if (fin && f->left_bps) {
		promise_sub(st, f->bucket, f->left_bps);
		st->fin_returned_bps += f->left_bps;
		f->left_bps = 0;
	}
	bpf_spin_unlock(&st->lock);
	return 0;
}

/* Extreme: a new approval of `code` for flow `f` (its entry, fresh or reused), promised
 * until its flow's first packet, for at most 2 RTTs. */
__attribute__((noinline)) int qs_track_approval(struct stl_qs_flow *f, __u64 rtt_ns, __u32 code)
{
	struct stl_qs_router *st = router();
	__u64 now = bpf_ktime_get_ns(), wait;

	if (!st || !f)
		return 0;
	wait = rtt_ns ? 2 * rtt_ns : approval_window_ns(st);
	bpf_spin_lock(&st->lock);
	f->rate_bps = qs_code_bps(code);
	f->left_bps = f->rate_bps;
	f->t_approve = now;
	f->t_first = 0;
	f->rtt_ns = rtt_ns;
	f->arrived = 0;
	f->bucket = promise_add(st, (now + wait) / STL_QS_BUCKET_NS, f->left_bps, now);
	st->tracked++;
	bpf_spin_unlock(&st->lock);
	return 0;
}

/* The Target algorithm's answer to a request of `old_code`: the code approved, 0 to reject.
 * Basic counts recent approvals; Extreme (`prev`: the flow's earlier approval, which this
 * request replaces, or NULL) what its approvals promise. */
__attribute__((noinline)) int qs_decide(__u32 old_code, int extreme, struct stl_qs_flow *prev)
{
	struct stl_qs_router *st = router();
	__u64 now = bpf_ktime_get_ns(), epoch, aepoch, util, recent, limit, request, grant;
	__u32 code = 0;

	if (!st || !st->interval_ns || !st->approval_interval_ns)
		return 0;
	epoch = now / st->interval_ns;
	aepoch = now / st->approval_interval_ns;
	old_code &= 15;
	request = qs_code_bps(old_code);
	bpf_spin_lock(&st->lock);
	util = utilisation(st, epoch);
	if (extreme) {
		if (prev) {
			promise_sub(st, prev->bucket, prev->left_bps);
			prev->left_bps = 0;
		}
		recent = promised(st, now);
	} else {
		recent = recent_approvals(st, aepoch);
	}
	limit = st->capacity_bps * st->thresh_permille / 1000;
	st->last_util_bps = util;
	st->last_promised_bps = recent;
	st->sum_util_bps += util;
	st->sum_promised_bps += recent;
	st->requests++;
	if (util + recent < limit && request) {
		grant = limit - util - recent;
		if (grant > request)
			grant = request;
		code = qs_bps_code(grant);
	}
	if (code) {
		st->approved_bps[aepoch % STL_QS_SLOTS] += qs_code_bps(code);
		st->granted_bps += qs_code_bps(code);
		if (code == old_code)
			st->approved++;
		else
			st->reduced++;
	} else {
		st->rejected++;
	}
	bpf_spin_unlock(&st->lock);
	return code;
}

SEC("tc")
int stl_qs_router(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	struct stl_qs_router *st = router();
	int at, report = -1, request = -1, tcp = 0, code;
	struct stl_qs_flow fresh = {}, *f = NULL;
	struct stl_qs_key key = {};
	struct stl_qs_rtt *hs;
	__u8 optb[STL_QS_LEN], th[14];           /* the TCP header up to its flags */
	__u64 rtt_ns = 0;

	if (!st || !st->interval_ns || !st->capacity_bps || !st->approval_interval_ns)
		return TC_ACT_OK;
	at = qs_option_at(skb);
	if (at >= 0 && !bpf_skb_load_bytes(skb, at, optb, STL_QS_LEN)) {
		if ((optb[2] >> 4) == STL_QS_FUNC_REPORT)
			report = optb[2] & 15;           /* a report: nothing to decide */
		else if ((optb[2] >> 4) == 0)
			request = optb[2] & 15;
	}
	if (st->extreme && (void *)(ip + 1) <= end && eth->h_proto == bpf_htons(ETH_P_IP) &&
	    ip->protocol == IPPROTO_TCP &&
	    !bpf_skb_load_bytes(skb, ETH_HLEN + ip->ihl * 4, th, sizeof(th))) {
		key.client_ip = ip->daddr;               /* toward the client: its server sends */
		key.server_ip = ip->saddr;
		__builtin_memcpy(&key.server_port, &th[0], 2);
		__builtin_memcpy(&key.client_port, &th[2], 2);
		hs = bpf_map_lookup_elem(&stl_qs_rtts, &key);
		if (hs)
			rtt_ns = hs->rtt_ns;
		f = bpf_map_lookup_elem(&stl_qs_approvals, &key);
		tcp = 1;
	}
	qs_measure(skb->len, report);
	if (request < 0) {
		if (f)
			qs_track(f, rtt_ns, skb->len, report, th[13] & 0x01);
		else if (report >= 0 && st->extreme)
			__sync_fetch_and_add(&st->reports_untracked, 1);
		return TC_ACT_OK;
	}
	code = qs_decide(request, tcp, f);
	if (code && tcp) {
		if (!f) {
			bpf_map_update_elem(&stl_qs_approvals, &key, &fresh, BPF_ANY);
			f = bpf_map_lookup_elem(&stl_qs_approvals, &key);
		}
		if (f)
			qs_track_approval(f, rtt_ns, code);
	}
	qs_answer(skb, at, code, bpf_get_prandom_u32());
	return TC_ACT_OK;
}

/* Extreme: ingress of the same interface (from the clients): each flow's handshake RTT
 * seen from this router, from the client's SYN to its first ACK — the time the SYN takes
 * to the server and the SYN-ACK back, plus the SYN-ACK's way to the client and the ACK's
 * back. */
SEC("tc")
int stl_qs_router_rtt(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	struct stl_qs_rtt fresh = {}, *hs;
	struct stl_qs_key key = {};
	struct tcphdr *tcp;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->protocol != IPPROTO_TCP ||
	    ip->ihl < 5)
		return TC_ACT_OK;
	tcp = (void *)ip + ip->ihl * 4;
	if ((void *)(tcp + 1) > end)
		return TC_ACT_OK;
	key.client_ip = ip->saddr;               /* from the client */
	key.server_ip = ip->daddr;
	key.client_port = tcp->source;
	key.server_port = tcp->dest;
	if (tcp->syn && !tcp->ack) {
		fresh.t_syn = bpf_ktime_get_ns();
		bpf_map_update_elem(&stl_qs_rtts, &key, &fresh, BPF_ANY);
		return TC_ACT_OK;
	}
	if (!tcp->ack || tcp->syn)
		return TC_ACT_OK;
	hs = bpf_map_lookup_elem(&stl_qs_rtts, &key);
	if (hs && !hs->rtt_ns)
		hs->rtt_ns = bpf_ktime_get_ns() - hs->t_syn;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
