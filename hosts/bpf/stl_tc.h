/* Constants of tc programs that vmlinux.h (BTF types only) does not carry. */
#ifndef STL_TC_H
#define STL_TC_H

#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2

#endif
