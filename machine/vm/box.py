"""A Vagrant box for the libvirt provider, built from startlab's VM image (machine/vm/image.py):
no download, the same Debian userland and kernel the kernel matrix boots.

The image is a job runner (its init runs one job and powers off); a box must be a machine that
Vagrant can log in to. So the box is the image plus what Vagrant's base-box contract asks for
(systemd, DHCP on the first interface, sshd, a `vagrant` user with Vagrant's insecure key and
password-less sudo, rsync for the synced folder), installed from the same Debian mirror into a
copy of the image. The box boots the image's Debian 12 kernel directly (the box's own
Vagrantfile gives libvirt the kernel, initrd and command line), since the image has no
partition table or boot loader.

Vagrant keeps the box (in startlab's Vagrant home, machine/vm/vagrant.py) under a key of the
image's key and this file's recipe: a box is rebuilt only when either changes.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from machine.errors import UserError
from machine.vm import image as vm_image

NAME = "startlab/debian12"
KERNEL = "6.1"                         # Debian 12's own kernel
# What Vagrant needs of a guest, on top of the image's packages.
PACKAGES = ("systemd-sysv", "udev", "dbus", "openssh-server", "sudo", "rsync")
VAGRANT_KEYS = Path("/usr/share/rubygems-integration/all/gems")
# DHCP on every wired interface: libvirt's management network answers on the first.
NETWORKD = "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n"
# The box's own Vagrantfile: boot the box's kernel directly, on the serial console.
BOX_VAGRANTFILE = """\
# Written by startlab's box builder (machine/vm/box.py): the image has no boot loader.
Vagrant.configure("2") do |config|
  config.vm.provider "libvirt" do |lv|
    lv.kernel = File.join(File.dirname(__FILE__), "vmlinuz")
    lv.initrd = File.join(File.dirname(__FILE__), "initrd.img")
    lv.cmd_line = "root=/dev/vda rw console=ttyS0 net.ifnames=1"
  end
end
"""
# Run in a private mount namespace (unshare -m): the loop mount and the chroot's /proc,
# /sys and /dev vanish with it, even when the build is killed.
CUSTOMISE = r"""
set -eu
root=$1; disk=$2; key=$3; packages=$4
mkdir -p "$root"
mount -o loop "$disk" "$root"
mount -t proc proc "$root/proc"; mount -t sysfs sys "$root/sys"; mount --bind /dev "$root/dev"
cp /etc/resolv.conf "$root/etc/resolv.conf"
export DEBIAN_FRONTEND=noninteractive
chroot "$root" apt-get update -qq
chroot "$root" apt-get install -y -qq --no-install-recommends $packages
chroot "$root" apt-get clean
chroot "$root" useradd -m -s /bin/bash vagrant
chroot "$root" sh -c 'echo vagrant:vagrant | chpasswd'
install -d -m 700 -o 0 -g 0 "$root/home/vagrant/.ssh"
cp "$key" "$root/home/vagrant/.ssh/authorized_keys"
chmod 600 "$root/home/vagrant/.ssh/authorized_keys"
chroot "$root" chown -R vagrant:vagrant /home/vagrant/.ssh
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' > "$root/etc/sudoers.d/vagrant"
chmod 440 "$root/etc/sudoers.d/vagrant"
printf '%s' "$NETWORKD" > "$root/etc/systemd/network/50-dhcp.network"
chroot "$root" systemctl enable systemd-networkd ssh
echo startlab > "$root/etc/hostname"
rel=$(ls "$root/boot" | sed -n 's/^vmlinuz-\(6\.1\..*\)$/\1/p' | tail -1)
cp "$root/boot/vmlinuz-$rel" "$(dirname "$disk")/vmlinuz"
cp "$root/boot/initrd.img-$rel" "$(dirname "$disk")/initrd.img"
echo "$rel" > "$(dirname "$disk")/release"
umount "$root/dev" "$root/sys" "$root/proc"
umount "$root"
"""


def _key() -> Path:
    keys = sorted(VAGRANT_KEYS.glob("vagrant-*/keys/vagrant.pub"))
    if not keys:
        raise UserError("Vagrant's insecure public key was not found (is Debian's vagrant package installed? "
                        "provision with playbooks/bootstrap.sh)")
    return keys[-1]


def box_key(image: vm_image.Image) -> str:
    recipe = json.dumps({"image": image.dir.name, "packages": PACKAGES, "customise": CUSTOMISE,
                         "networkd": NETWORKD, "vagrantfile": BOX_VAGRANTFILE}, sort_keys=True)
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def build_box(image: vm_image.Image, work: Path, progress=print) -> Path:
    """Build the .box file for `image` in `work` (the caller adds it to Vagrant and removes
    it: Vagrant keeps its own copy, and a second one of 2.5 GB would be waste)."""
    for tool in ("qemu-img", "unshare", "tar"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} is missing: provision with playbooks/bootstrap.sh --stage vagrant")
    t0 = time.monotonic()
    progress(f"building the Vagrant box {box_key(image)} from the image {image.dir.name} …")
    disk = work / "root.ext4"
    subprocess.run(["cp", "--sparse=always", str(image.disk), str(disk)], check=True)
    log = work / "build.log"
    with log.open("w") as out:
        r = subprocess.run(["unshare", "-m", "sh", "-c", CUSTOMISE, "customise", str(work / "mnt"), str(disk),
                            str(_key()), " ".join(PACKAGES)], stdout=out, stderr=subprocess.STDOUT,
                           env={**os.environ, "NETWORKD": NETWORKD})
    if r.returncode != 0:
        tail = "\n  ".join(log.read_text(errors="replace").splitlines()[-15:])
        raise UserError(f"customising the image for Vagrant failed (exit {r.returncode}):\n  {tail}")
    progress("  qcow2 …")
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(disk), str(work / "box.img")], check=True)
    disk.unlink()
    (work / "metadata.json").write_text(json.dumps({"provider": "libvirt", "format": "qcow2",
                                                    "virtual_size": int(vm_image.IMAGE_SIZE.rstrip("G"))}))
    (work / "Vagrantfile").write_text(BOX_VAGRANTFILE)
    box = work / "startlab.box"
    subprocess.run(["tar", "-C", str(work), "-cf", str(box), "metadata.json", "Vagrantfile", "box.img",
                    "vmlinuz", "initrd.img"], check=True)
    for name in ("box.img", "vmlinuz", "initrd.img"):
        (work / name).unlink()
    progress(f"  built in {time.monotonic() - t0:.0f} s (kernel {(work / 'release').read_text().strip()})")
    return box
