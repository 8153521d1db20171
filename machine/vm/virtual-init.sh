#!/bin/sh
# PID 1 of startlab's guest on the virtual clock (machine/vm/icount.py). It is kept minimal
# because it is part of the image: it mounts the bundle (the second NVDIMM, an ext4 image of
# the checkout the host made for this boot) read-only at the host's checkout path and hands
# over to the bundle's boot script, which holds everything that may change with the code.
# The kernel's command line names the checkout's path: startlab.checkout=/path.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
checkout=$(sed -n 's/.*startlab\.checkout=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p "$checkout"
echo "startlab-guest: up, kernel $(uname -r)" > /dev/console
if mount -t ext4 -o ro,noload /dev/pmem1 "$checkout"; then
  sh "$checkout/.startlab-virtual/boot.sh"
  echo "startlab-guest: done ($?)" > /dev/console
else
  echo "startlab-guest: no bundle on /dev/pmem1" > /dev/console
fi
echo o > /proc/sysrq-trigger
sleep 60
