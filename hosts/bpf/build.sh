#!/bin/sh
# Builds startlab's BPF objects into target/bpf/ against the running kernel's BTF.
# Idempotent and quick: vmlinux.h is regenerated only when the kernel changed, an object
# only when its source, a header here or vmlinux.h is newer than it.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${STARTLAB_BPF_OUT:-$HERE/../../target/bpf}
BPFTOOL=${BPFTOOL:-$(command -v bpftool || echo /usr/sbin/bpftool)}
CLANG=${CLANG:-clang}
mkdir -p "$OUT"
# One build at a time: a campaign's lanes each build before their first run, and two
# builders would move each other's temporary objects away.
exec 9>"$OUT/.build.lock"
flock 9

kernel=$(uname -r)
if [ ! -s "$OUT/vmlinux.h" ] || [ "$(cat "$OUT/vmlinux.kernel" 2>/dev/null)" != "$kernel" ]; then
    "$BPFTOOL" btf dump file /sys/kernel/btf/vmlinux format c > "$OUT/vmlinux.h.tmp"
    mv "$OUT/vmlinux.h.tmp" "$OUT/vmlinux.h"
    echo "$kernel" > "$OUT/vmlinux.kernel"
fi

arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
for src in "$HERE"/*.bpf.c; do
    obj="$OUT/$(basename "$src" .bpf.c).bpf.o"
    if [ -f "$obj" ] && [ "$obj" -nt "$src" ] && [ -z "$(find "$HERE" -name "*.h" -newer "$obj")" ] \
        && [ "$obj" -nt "$OUT/vmlinux.h" ]; then
        continue
    fi
    "$CLANG" -O2 -g -target bpf -D__TARGET_ARCH_"$arch" -Wall -Werror \
        -I"$OUT" -I"$HERE" -c "$src" -o "$obj.tmp"
    mv "$obj.tmp" "$obj"
    echo "built $obj"
done
