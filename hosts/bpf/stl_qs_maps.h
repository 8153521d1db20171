/* Quick-Start maps shared by the sock_ops program (stl_sockops.bpf.c, which pins them)
 * and the endpoints' tc programs (stl_qs_host.bpf.c, loaded reusing those pins). */
#ifndef STL_QS_MAPS_H
#define STL_QS_MAPS_H
#include "stl_common.h"

/* Quick-Start hosts of this instance by IPv4 address: config and counters. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct stl_qs_host);
} stl_qs_hosts SEC(".maps");

/* Server side: the request each SYN-ACK carried, until the handshake's ACK comes back. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct stl_qs_key);
	__type(value, struct stl_qs_req);
} stl_qs_sent SEC(".maps");

/* Client side: the request each SYN-ACK arrived with, until the echo is written. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct stl_qs_key);
	__type(value, struct stl_qs_req);
} stl_qs_recv SEC(".maps");

/* Server side: the Report of Approved Rate each connection owes, until a packet carries it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct stl_qs_key);
	__type(value, struct stl_qs_report);
} stl_qs_reports SEC(".maps");

#endif
