#!/bin/sh
# Builds startlab's BPF objects into target/bpf/ against the running kernel's BTF: every
# *.bpf.c here (the shared programs) and in hosts/implementations/ (a scheme's congestion
# controls, beside its Python module), each into <name>.bpf.o, so a name must be unique.
# Idempotent and quick: vmlinux.h is regenerated only when the kernel changed, an object
# only when its source, a source it includes (a variant built from another's source), a
# header in either place or vmlinux.h is newer than it.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
SCHEMES=$(cd "$HERE/../implementations" && pwd)
OUT=${STARTLAB_BPF_OUT:-$TOP/target/bpf}
BPFTOOL=${BPFTOOL:-$(command -v bpftool || echo /usr/sbin/bpftool)}
CLANG=${CLANG:-clang}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# One build at a time: a campaign's lanes each build before their first run, and two
# builders would move each other's temporary objects away.
exec 9>"$OUT/.build.lock"
flock 9

# Another kernel's BTF (STARTLAB_BTF, its release in STARTLAB_BTF_KERNEL): the virtual
# clock's guest kernel, whose objects the host builds once (machine/vm/icount.py).
kernel=${STARTLAB_BTF_KERNEL:-$(uname -r)}
btf=${STARTLAB_BTF:-/sys/kernel/btf/vmlinux}
if [ ! -s "$OUT/vmlinux.h" ] || [ "$(cat "$OUT/vmlinux.kernel" 2>/dev/null)" != "$kernel" ]; then
    "$BPFTOOL" btf dump file "$btf" format c > "$OUT/vmlinux.h.tmp"
    mv "$OUT/vmlinux.h.tmp" "$OUT/vmlinux.h"
    echo "$kernel" > "$OUT/vmlinux.kernel"
fi

dup=$(for src in "$HERE"/*.bpf.c "$SCHEMES"/*.bpf.c; do basename "$src"; done | sort | uniq -d)
if [ -n "$dup" ]; then
    echo "build.sh: BPF sources of the same name in $HERE and $SCHEMES: $dup" >&2
    exit 1
fi

arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
for src in "$HERE"/*.bpf.c "$SCHEMES"/*.bpf.c; do
    obj="$OUT/$(basename "$src" .bpf.c).bpf.o"
    included=$(sed -n 's/^#include "\([^"]*\.bpf\.c\)"/\1/p' "$src")
    stale=""
    for inc in $included; do
        [ "$(dirname "$src")/$inc" -nt "$obj" ] && stale=yes
    done
    if [ -f "$obj" ] && [ -z "$stale" ] && [ "$obj" -nt "$src" ] \
        && [ -z "$(find "$HERE" "$SCHEMES" -name "*.h" -newer "$obj")" ] && [ "$obj" -nt "$OUT/vmlinux.h" ]; then
        continue
    fi
    # The debug and BTF line information names sources by path: mapped to fixed names, the
    # same sources give the same object in any checkout (the virtual clock's bundle carries
    # it, docs/emulation.md); an object that still names this checkout is refused.
    (cd "$TOP" && "$CLANG" -O2 -g -target bpf -D__TARGET_ARCH_"$arch" -Wall -Werror \
        -ffile-prefix-map="$TOP"=/startlab-src -ffile-prefix-map="$OUT"=/startlab-bpf \
        -I"$OUT" -I"$HERE" -c "$src" -o "$obj.tmp")
    if grep -qF "$TOP/" "$obj.tmp"; then
        rm -f "$obj.tmp"
        echo "build.sh: $obj would name the checkout's path $TOP (clang ignored -ffile-prefix-map?)" >&2
        exit 1
    fi
    mv "$obj.tmp" "$obj"
    echo "built $obj"
done
