#!/bin/sh
# The virtual clock's guest after PID 1 (virtual-init.sh) mounted the bundle: the rest of the
# guest's mounts, then the job, its output on the log port. Nothing here touches the host but
# the two virtio serial ports, whose writes QEMU completes within the writing instruction, so
# the guest's time never depends on how fast the host answers (machine/vm/icount.py).
set -u
checkout=$(sed -n 's/.*startlab\.checkout=\([^ ]*\).*/\1/p' /proc/cmdline)
here="$checkout/.startlab-virtual"
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
for d in /dev/shm /run /tmp /var/tmp /root; do mount -t tmpfs tmpfs "$d"; done
# A checkout under one of those (a clone in /tmp) was just hidden: mount the bundle again.
if [ ! -d "$here" ]; then
  mkdir -p "$checkout" && mount -t ext4 -o ro,noload /dev/pmem1 "$checkout"
fi
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
# No transparent huge pages: khugepaged's collapse of one (a 2 MB copy) runs for 1.5–4 ms
# of guest time without a preemption point in Debian's voluntary-preemption kernels, and the
# delay line, real-time on the guest's one CPU, waited behind it (traced: lateness p99 1.7
# ms in the one test window that met khugepaged's scan, 50 µs in the others).
echo never > /sys/kernel/mm/transparent_hugepage/enabled
hostname startlab-guest
ip link set lo up
port() {
  for d in /sys/class/virtio-ports/*; do
    [ "$(cat "$d/name" 2>/dev/null)" = "$1" ] && echo "/dev/$(basename "$d")"
  done
}
exec 3>"$(port startlab.log)"
STARTLAB_EXPORT=$(port startlab.runs)
# The BPF objects the host built against this kernel, where build.sh may take its lock.
mkdir -p /run/startlab-bpf && cp -a "$here/bpf/." /run/startlab-bpf/ 2>/dev/null
export STARTLAB_EXPORT STARTLAB_BPF_OUT=/run/startlab-bpf STARTLAB_CLOCK_FILE="$here/clock.json" STARTLAB_TOOLS="$here/tools" \
  PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 HOME=/root STARTLAB_NO_REEXEC=1 STARTLAB_GIT_REV="$(cat "$here/git_rev")"
echo "startlab-guest: job from uptime $(cut -d' ' -f1 /proc/uptime) s" >&3
cd /run && sh "$here/job.sh" >&3 2>&3
rc=$?
echo "startlab-guest: uptime $(cut -d' ' -f1 /proc/uptime)" >&3
echo "startlab-job: exit $rc" >&3
