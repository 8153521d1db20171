// SPDX-License-Identifier: GPL-2.0
/* Quick-Start (RFC 4782) at the endpoints, tc (clsact) programs.
 *
 * stl_qs_sender — egress of a Quick-Start server: every SYN-ACK of a server listed in
 *   stl_qs_hosts leaves with an 8-byte IPv4 option, a Quick-Start Request of the
 *   server's rate code with a random QS TTL and a random 30-bit nonce (RFC 4782 §3.1,
 *   §4.1). The room is made between the IP and TCP headers; IHL, total length and the
 *   header checksum are fixed (TCP's pseudo-header does not cover IP options). What was
 *   sent is remembered per connection in stl_qs_sent for the sock_ops program, which
 *   checks the client's echo. The option rides on the SYN-ACK only, which carries no
 *   data: the MSS needs no room for it.
 *
 * stl_qs_receiver — ingress of a Quick-Start client: a SYN-ACK arriving with a request
 *   is recorded in stl_qs_recv (rate, TTL diff = IP TTL - QS TTL as received, nonce);
 *   the sock_ops program echoes it in TCP option 27 on the handshake's ACK (§4.2). The
 *   kernel's own IP layer ignores the unknown option.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "stl_qs_maps.h"
#include "stl_qs_pkt.h"

static __always_inline struct iphdr *ipv4(struct __sk_buff *skb, void **end)
{
	void *data = (void *)(long)skb->data;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;

	*end = (void *)(long)skb->data_end;
	if ((void *)(ip + 1) > *end || eth->h_proto != bpf_htons(ETH_P_IP))
		return NULL;
	return ip;
}

static __always_inline int is_synack(struct iphdr *ip, void *end, struct tcphdr **tcp_out)
{
	struct tcphdr *tcp = (void *)ip + ip->ihl * 4;

	if (ip->protocol != IPPROTO_TCP || ip->ihl < 5 || (void *)(tcp + 1) > end)
		return 0;
	*tcp_out = tcp;
	return tcp->syn && tcp->ack;
}

SEC("tc")
int stl_qs_sender(struct __sk_buff *skb)
{
	struct stl_qs_host *host;
	struct stl_qs_req sent = {};
	struct stl_qs_key key;
	struct tcphdr *tcp;
	struct iphdr *ip;
	__u32 saddr, qs_ttl;
	__u8 *opt;
	void *end;

	ip = ipv4(skb, &end);
	if (!ip || ip->ihl != 5 || !is_synack(ip, end, &tcp))
		return TC_ACT_OK;
	saddr = ip->saddr;
	host = bpf_map_lookup_elem(&stl_qs_hosts, &saddr);
	if (!host || !host->rate_code)
		return TC_ACT_OK;
	key.client_ip = ip->daddr;
	key.server_ip = ip->saddr;
	key.client_port = tcp->dest;
	key.server_port = tcp->source;
	qs_ttl = bpf_get_prandom_u32() & 0xff;
	sent.rate_code = host->rate_code & 15;
	sent.ttl_diff = (ip->ttl - qs_ttl) & 0xff;
	sent.nonce = bpf_get_prandom_u32() & 0x3fffffff;

	if (bpf_skb_adjust_room(skb, STL_QS_LEN, BPF_ADJ_ROOM_NET, 0)) {
		__sync_fetch_and_add(&host->errors, 1);
		return TC_ACT_OK;
	}
	ip = ipv4(skb, &end);
	if (!ip)
		return TC_ACT_OK;
	opt = (__u8 *)(ip + 1);
	if ((void *)(opt + STL_QS_LEN) > end) {
		__sync_fetch_and_add(&host->errors, 1);
		return TC_ACT_OK;
	}
	opt[0] = STL_QS_IPOPT;
	opt[1] = STL_QS_LEN;
	opt[2] = sent.rate_code;             /* function 0 (request) in the high nibble */
	opt[3] = qs_ttl;
	opt[7] = 0;                          /* the two reserved bits */
	qs_set_nonce(opt, sent.nonce);
	ip->ihl = 7;
	ip->tot_len = bpf_htons(bpf_ntohs(ip->tot_len) + STL_QS_LEN);
	if (ip_csum_fix(ip, end)) {
		__sync_fetch_and_add(&host->errors, 1);
		return TC_ACT_OK;
	}
	bpf_map_update_elem(&stl_qs_sent, &key, &sent, BPF_ANY);
	__sync_fetch_and_add(&host->requests_sent, 1);
	return TC_ACT_OK;
}

SEC("tc")
int stl_qs_receiver(struct __sk_buff *skb)
{
	struct stl_qs_host *host;
	struct stl_qs_req got = {};
	struct stl_qs_key key;
	struct tcphdr *tcp;
	struct iphdr *ip;
	__u32 daddr;
	__u8 *opt;
	void *end;
	int off;

	ip = ipv4(skb, &end);
	if (!ip || ip->ihl <= 5 || !is_synack(ip, end, &tcp))
		return TC_ACT_OK;
	daddr = ip->daddr;
	host = bpf_map_lookup_elem(&stl_qs_hosts, &daddr);
	if (!host)
		return TC_ACT_OK;
	off = qs_find(ip, end);
	if (off < 0)
		return TC_ACT_OK;
	opt = (__u8 *)(ip + 1) + off;
	if ((void *)(opt + STL_QS_LEN) > end || (opt[2] >> 4) != 0)
		return TC_ACT_OK;                /* not a request (e.g. a Report of Approved Rate) */
	key.client_ip = ip->daddr;
	key.server_ip = ip->saddr;
	key.client_port = tcp->dest;
	key.server_port = tcp->source;
	got.rate_code = opt[2] & 15;
	got.ttl_diff = (ip->ttl - opt[3]) & 0xff;
	got.nonce = qs_nonce(opt);
	bpf_map_update_elem(&stl_qs_recv, &key, &got, BPF_ANY);
	__sync_fetch_and_add(&host->requests_seen, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
