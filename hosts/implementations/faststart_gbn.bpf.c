// SPDX-License-Identifier: GPL-2.0
/* TCP Fast Start with §3.3.4's recovery from multiple losses: the congestion control
 * fsgbn, faststart.bpf.c built with STL_FS_GBN. An object of its own because it calls the
 * kfunc of hosts/kmod/stl_fs_gbn.c, which resolves only where that module is loaded: fs
 * loads everywhere, fsgbn only there. */
#define STL_FS_GBN
#include "faststart.bpf.c"
