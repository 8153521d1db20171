#!/bin/sh
# PID 1 of startlab's VM guest (no systemd): mounts what startlab needs, the host's checkout
# (read-only, at the host's path, so its venv and native builds work unchanged) and the job's
# directory, runs the job the host wrote there, records its exit code and powers off.
# The kernel's command line names the checkout's path: startlab.checkout=/path.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -o remount,rw /
hostname startlab-guest
ip link set lo up
modprobe -q 9pnet_virtio
modprobe -q 9p
checkout=$(sed -n 's/.*startlab\.checkout=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p "$checkout" /job
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 checkout "$checkout"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job /job
echo "startlab-guest: up, kernel $(uname -r)" > /dev/console
cd /job && PYTHONDONTWRITEBYTECODE=1 HOME=/root sh /job/job.sh > /job/job.log 2>&1
echo $? > /job/rc.tmp && mv /job/rc.tmp /job/rc
sync
umount /job
echo "startlab-guest: done" > /dev/console
echo o > /proc/sysrq-trigger
sleep 60
