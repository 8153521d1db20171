// SPDX-License-Identifier: GPL-2.0
/* Fault injection, tc egress of one interface, by one of two rules:
 *   - drop every IPv4 packet whose DSCP is the configured one;
 *   - drop the first transmission of chosen TCP data segments: those starting at the
 *     configured byte offsets of a connection's data (sequence number minus the ISN of
 *     the latest SYN that left here, minus one). A retransmission of the same data passes.
 * It counts what it dropped and what it passed.
 *
 * Why: tests force a scheme's reaction deterministically instead of hoping a queue
 * overflows at the right moment. The worst case of a drop-priority router is one that,
 * under load, loses every low-priority packet (TCP Fast Start's quick recovery); chosen
 * segments make the loss pattern a loss recovery is tested on (two losses in one window
 * for the recovery from multiple losses). One load per interface; its array map (one
 * entry) is pinned next to it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "stl_tc.h"

#define STL_FAULT_SEGMENTS 8
#define IPPROTO_TCP_ 6

struct stl_fault {
	__u32 drop_dscp_plus_one;   /* 0: drop no DSCP */
	__u32 n_segments;           /* how many of segment_offsets are set (0: drop no segment) */
	__u64 dropped;
	__u64 passed;
	__u32 isn;                  /* of the latest SYN that left here */
	__u32 dropped_mask;         /* which of segment_offsets were dropped already */
	__u32 segment_offsets[STL_FAULT_SEGMENTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stl_fault);
} stl_fault_cfg SEC(".maps");

/* Whether this TCP segment is the first transmission of a chosen one (and mark it so). */
static __always_inline int chosen_segment(struct stl_fault *f, struct iphdr *ip, void *end)
{
	struct tcphdr *tcp = (void *)ip + ip->ihl * 4;
	__u32 seq, offset, payload;
	int i;

	if (ip->protocol != IPPROTO_TCP_ || ip->ihl < 5 || (void *)(tcp + 1) > end)
		return 0;
	seq = bpf_ntohl(tcp->seq);
	if (tcp->syn) {                     /* a new connection: its offsets start again */
		f->isn = seq;
		f->dropped_mask = 0;
		return 0;
	}
	payload = bpf_ntohs(ip->tot_len) - ip->ihl * 4 - tcp->doff * 4;
	if ((int)payload <= 0)
		return 0;
	offset = seq - f->isn - 1;
#pragma unroll
	for (i = 0; i < STL_FAULT_SEGMENTS; i++) {
		if (i < f->n_segments && f->segment_offsets[i] == offset && !(f->dropped_mask & (1u << i))) {
			f->dropped_mask |= 1u << i;
			return 1;
		}
	}
	return 0;
}

SEC("tc")
int stl_fault_drop(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	struct stl_fault *f;
	__u32 zero = 0;

	f = bpf_map_lookup_elem(&stl_fault_cfg, &zero);
	if (!f)
		return TC_ACT_OK;
	if ((void *)(ip + 1) <= end && eth->h_proto == bpf_htons(ETH_P_IP) &&
	    ((f->drop_dscp_plus_one && (ip->tos >> 2) + 1 == f->drop_dscp_plus_one) ||
	     (f->n_segments && chosen_segment(f, ip, end)))) {
		__sync_fetch_and_add(&f->dropped, 1);
		return TC_ACT_SHOT;
	}
	__sync_fetch_and_add(&f->passed, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
