// SPDX-License-Identifier: GPL-2.0
/* Quick-Start (RFC 4782) at the endpoints, tc (clsact) programs.
 *
 * stl_qs_sender — egress of a Quick-Start server: every SYN-ACK of a server listed in
 *   stl_qs_hosts leaves with an 8-byte IPv4 option, a Quick-Start Request of the
 *   server's rate code with a random QS TTL and a random 30-bit nonce (RFC 4782 §3.1,
 *   §4.1). So does the first data segment after each restart after idle (Scharf's rule):
 *   the connection's congestion control counts the kernel's restarts in its private
 *   state (struct stl_qs_priv), read here from the socket, and stl_qs_restarts keeps the
 *   count the last request was for. The room is made between the IP and TCP headers;
 *   IHL, total length and the header checksum are fixed (TCP's pseudo-header does not
 *   cover IP options). A full data segment has no room for 8 more bytes: the server's
 *   route MTU is 8 bytes less (hosts/implementations/quickstart.py), so every segment
 *   of its connections is 8 bytes shorter. What was sent is remembered per connection
 *   in stl_qs_sent for the sock_ops program, which checks the client's echo.
 *   Each outcome (stl_qs_reports, written by sock_ops) puts a Report of Approved Rate on
 *   the connection's next packet (RFC 4782 §3.1): the approved code, or 0. A packet of
 *   several segments (GSO) keeps its segment size and every segment carries the report.
 *
 * stl_qs_receiver — ingress of a Quick-Start client: a segment arriving with a request
 *   (a SYN-ACK, or data after idle) is recorded in stl_qs_recv (rate, TTL diff = IP TTL
 *   - QS TTL as received, nonce); the sock_ops program echoes it in TCP option 27 on the
 *   next ACK (§4.2). The kernel's own IP layer ignores the unknown option.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "stl_ca_priv.h"
#include "stl_qs_maps.h"
#include "stl_qs_pkt.h"

/* Server side: the restart count the last request after idle of each connection was for. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct stl_qs_key);
	__type(value, __u32);
} stl_qs_restarts SEC(".maps");

/* Where struct stl_qs_priv keeps `restarts` in the socket's icsk_ca_priv (u64 words). */
#define QS_RESTARTS_OFF __builtin_offsetof(struct stl_qs_priv, restarts)

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

/* The TCP header of an IPv4 TCP packet, or NULL. */
static __always_inline struct tcphdr *tcp_of(struct iphdr *ip, void *end)
{
	struct tcphdr *tcp = (void *)ip + ip->ihl * 4;

	if (ip->protocol != IPPROTO_TCP || ip->ihl < 5 || (void *)(tcp + 1) > end)
		return NULL;
	return tcp;
}

/* Does this data segment follow a restart after idle no request went out for yet? Its
 * socket is a Quick-Start server's (its mark says so), whose congestion control counts
 * the restarts; returns the count to ask for, or 0. */
static __always_inline __u32 restart_to_request(struct __sk_buff *skb, struct stl_qs_key *key)
{
	struct bpf_sock *bsk = skb->sk;
	struct tcp_sock *tp;
	__u32 restarts, *done;
	__u64 word;

	if (!STL_QS_MARK_IS(skb->mark) || !bsk)
		return 0;
	tp = bpf_skc_to_tcp_sock(bsk);
	if (!tp)
		return 0;
	word = tp->inet_conn.icsk_ca_priv[QS_RESTARTS_OFF / 8];
	restarts = (word >> ((QS_RESTARTS_OFF % 8) * 8)) & 0xff;
	if (!restarts)
		return 0;
	done = bpf_map_lookup_elem(&stl_qs_restarts, key);
	if (done && *done == restarts)
		return 0;
	return restarts;
}

/* Put an 8-byte Quick-Start option (RFC 4782 §3.1) right after the 20-byte IPv4 header:
 * `func_rate` is the third byte (function, rate), `byte4` the fourth (the QS TTL of a
 * request, unused in a report). `flags` BPF_F_ADJ_ROOM_FIXED_GSO keeps a multi-segment
 * packet's segment size, so that every segment carries the option within the MTU. */
static __always_inline int put_option(struct __sk_buff *skb, __u8 func_rate, __u8 byte4, __u32 nonce, __u64 flags)
{
	struct iphdr *ip;
	__u8 *opt;
	void *end;

	if (bpf_skb_adjust_room(skb, STL_QS_LEN, BPF_ADJ_ROOM_NET, flags))
		return -1;
	ip = ipv4(skb, &end);
	if (!ip)
		return -1;
	opt = (__u8 *)(ip + 1);
	if ((void *)(opt + STL_QS_LEN) > end)
		return -1;
	opt[0] = STL_QS_IPOPT;
	opt[1] = STL_QS_LEN;
	opt[2] = func_rate;
	opt[3] = byte4;
	opt[7] = 0;                          /* the two reserved bits */
	qs_set_nonce(opt, nonce);
	ip->ihl = 7;
	ip->tot_len = bpf_htons(bpf_ntohs(ip->tot_len) + STL_QS_LEN);
	return ip_csum_fix(ip, end);
}

/* Put a Quick-Start Request of `host`'s rate into the packet and remember it in
 * stl_qs_sent; 0 on success. */
static __always_inline int put_request(struct __sk_buff *skb, struct stl_qs_host *host, struct stl_qs_key *key,
				       __u32 restart)
{
	struct stl_qs_req sent = {};
	struct iphdr *ip;
	__u32 qs_ttl;
	void *end;

	ip = ipv4(skb, &end);
	if (!ip)
		return -1;
	qs_ttl = bpf_get_prandom_u32() & 0xff;
	sent.rate_code = host->rate_code & 15;
	sent.ttl_diff = (ip->ttl - qs_ttl) & 0xff;
	sent.nonce = bpf_get_prandom_u32() & 0x3fffffff;
	sent.restart = restart;
	/* function 0 (request) in the high nibble of the third byte */
	if (put_option(skb, sent.rate_code, qs_ttl, sent.nonce, 0))
		return -1;
	bpf_map_update_elem(&stl_qs_sent, key, &sent, BPF_ANY);
	return 0;
}

/* Put the Report of Approved Rate the connection owes, if it owes one (function 1000, the
 * approved code or 0, the request's nonce): on the first packet after the request's
 * outcome, which is the first Quick-Start data packet of an approved one, or a control
 * packet before it (RFC 4782 §3.1). 1 if a report went out, 0 if none was owed, -1 on error. */
static __always_inline int put_report(struct __sk_buff *skb, struct stl_qs_host *host, struct stl_qs_key *key)
{
	struct stl_qs_report *owed, rep;

	owed = bpf_map_lookup_elem(&stl_qs_reports, key);
	if (!owed)
		return 0;
	rep = *owed;
	bpf_map_delete_elem(&stl_qs_reports, key);
	if (put_option(skb, (STL_QS_FUNC_REPORT << 4) | (rep.rate_code & 15), 0, rep.nonce,
		       BPF_F_ADJ_ROOM_FIXED_GSO))
		return -1;
	__sync_fetch_and_add(&host->reports_sent, 1);
	if (!rep.rate_code)
		__sync_fetch_and_add(&host->reports_zero, 1);
	if (skb->gso_segs > 1)
		__sync_fetch_and_add(&host->reports_gso, 1);
	return 1;
}

SEC("tc")
int stl_qs_sender(struct __sk_buff *skb)
{
	struct stl_qs_host *host;
	struct stl_qs_key key;
	struct tcphdr *tcp;
	struct iphdr *ip;
	__u32 saddr, restart = 0, payload;
	void *end;

	ip = ipv4(skb, &end);
	if (!ip || ip->ihl != 5)
		return TC_ACT_OK;
	tcp = tcp_of(ip, end);
	if (!tcp)
		return TC_ACT_OK;
	saddr = ip->saddr;
	host = bpf_map_lookup_elem(&stl_qs_hosts, &saddr);
	if (!host || !host->rate_code)
		return TC_ACT_OK;
	key.client_ip = ip->daddr;
	key.server_ip = ip->saddr;
	key.client_port = tcp->dest;
	key.server_port = tcp->source;
	if (!(tcp->syn && tcp->ack)) {
		payload = bpf_ntohs(ip->tot_len) - 20 - tcp->doff * 4;
		if (tcp->syn || payload > 0xffff)
			return TC_ACT_OK;
		restart = payload && host->after_idle ? restart_to_request(skb, &key) : 0;
		if (!restart) {
			if (put_report(skb, host, &key) < 0)
				__sync_fetch_and_add(&host->errors, 1);
			return TC_ACT_OK;
		}
		if (skb->gso_segs > 1) {         /* one request per segment on the wire: no GSO */
			__sync_fetch_and_add(&host->errors, 1);
			return TC_ACT_OK;
		}
	}
	if (put_request(skb, host, &key, restart)) {
		__sync_fetch_and_add(&host->errors, 1);
		return TC_ACT_OK;
	}
	if (restart)                             /* asked for: not again for this restart */
		bpf_map_update_elem(&stl_qs_restarts, &key, &restart, BPF_ANY);
	__sync_fetch_and_add(restart ? &host->restart_requests : &host->requests_sent, 1);
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
	if (!ip || ip->ihl <= 5)
		return TC_ACT_OK;
	tcp = tcp_of(ip, end);
	if (!tcp)
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
