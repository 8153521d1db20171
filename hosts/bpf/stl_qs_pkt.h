/* Packet helpers of the Quick-Start tc programs: find the IPv4 option, fix the checksum. */
#ifndef STL_QS_PKT_H
#define STL_QS_PKT_H

#include "stl_tc.h"

#define IPPROTO_TCP 6
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10

/* Offset of the Quick-Start option from the start of the IPv4 options, or -1. The options
 * are a TLV list (RFC 791): end-of-list 0, no-op 1, else type, length, body. The loop ends
 * because every step moves `i` on by at least one and `i` is bounded: with no iteration
 * counter beside it, the verifier's states at the loop's head differ only in `i` and prune
 * (a counter made every iteration a state of its own: 164,865 instructions verified for the
 * receiver and 287,589 for the router, against 8,293 and 27,715 without). */
static __always_inline int qs_find(struct iphdr *ip, void *end)
{
	int optlen = ip->ihl * 4 - 20;
	__u8 *opts = (void *)(ip + 1);
	int i = 0;

	for (;;) {
		__u8 *p;

		if (i < 0 || i >= optlen || i > 38)
			return -1;
		p = opts + i;
		if ((void *)(p + 2) > end)
			return -1;
		if (p[0] == 0)
			return -1;
		if (p[0] == 1) {
			i++;
			continue;
		}
		if (p[0] == STL_QS_IPOPT && p[1] == STL_QS_LEN) {
			if (i + STL_QS_LEN > optlen || (void *)(p + STL_QS_LEN) > end)
				return -1;
			return i;
		}
		if (p[1] < 2)
			return -1;
		i += p[1];
	}
	return -1;
}

/* Recompute the IPv4 header checksum (options included): a field rewritten inside an
 * option may sit at an odd offset, where incremental updates would need byte swaps. */
static __always_inline int ip_csum_fix(struct iphdr *ip, void *end)
{
	__u16 *w = (__u16 *)ip;
	int words = ip->ihl * 2;
	__u32 sum = 0;

	ip->check = 0;
	/* unrolled: each word's bounds check is then against a constant offset */
#pragma clang loop unroll(full)
	for (int i = 0; i < 30; i++) {
		if (i < words) {
			if ((void *)(w + i + 1) > end)
				return -1;
			sum += w[i];
		}
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->check = ~sum & 0xffff;
	return 0;
}

static __always_inline __u64 qs_code_bps(__u32 code)
{
	return code ? 40000ULL << (code & 15) : 0;
}

/* The largest code whose rate is not above bps. */
static __always_inline __u32 qs_bps_code(__u64 bps)
{
	__u32 code = 0;

	for (__u32 c = 1; c <= 15; c++)
		if (qs_code_bps(c) <= bps)
			code = c;
	return code;
}

static __always_inline __u32 qs_nonce(__u8 *opt)
{
	return ((__u32)opt[4] << 22 | (__u32)opt[5] << 14 | (__u32)opt[6] << 6 | opt[7] >> 2);
}

static __always_inline void qs_set_nonce(__u8 *opt, __u32 nonce)
{
	__u32 word = nonce << 2 | (opt[7] & 3);

	opt[4] = word >> 24;
	opt[5] = word >> 16;
	opt[6] = word >> 8;
	opt[7] = word;
}

#endif
