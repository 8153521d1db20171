// SPDX-License-Identifier: GPL-2.0
/* Fault injection, tc egress of one interface: drop every IPv4 packet whose DSCP is the
 * configured one, counting what it dropped and what it passed.
 *
 * Why: the worst case of a drop-priority router is one that, under load, loses every
 * low-priority packet. Tests use it to force a scheme's fallback deterministically
 * (e.g. TCP Fast Start's quick recovery) instead of hoping a queue overflows at the
 * right moment. One load per interface; its array map (one entry) is pinned next to it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "stl_tc.h"

struct stl_fault {
	__u32 drop_dscp_plus_one;   /* 0: drop nothing */
	__u32 pad;
	__u64 dropped;
	__u64 passed;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stl_fault);
} stl_fault_cfg SEC(".maps");

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
	if ((void *)(ip + 1) <= end && eth->h_proto == bpf_htons(ETH_P_IP) && f->drop_dscp_plus_one &&
	    (ip->tos >> 2) + 1 == f->drop_dscp_plus_one) {
		__sync_fetch_and_add(&f->dropped, 1);
		return TC_ACT_SHOT;
	}
	__sync_fetch_and_add(&f->passed, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
