"""The Vagrant path's pure parts: the box's cache key, its boot settings, the report and the
private libvirtd's directories (the provisioning stage is in test_provisioning.py)."""
from __future__ import annotations

from pathlib import Path

from machine.vm import box, image, vagrant


def test_a_box_is_rebuilt_when_its_image_changes() -> None:
    a = box.box_key(image.Image(Path("/cache/aaaa")))
    assert a == box.box_key(image.Image(Path("/cache/aaaa")))
    assert a != box.box_key(image.Image(Path("/cache/bbbb")))


def test_the_box_boots_its_kernel_directly_and_has_what_vagrant_needs() -> None:
    # The image has no boot loader: the box's own Vagrantfile must hand libvirt the kernel.
    for setting in ("lv.kernel", "lv.initrd", "lv.cmd_line", "root=/dev/vda"):
        assert setting in box.BOX_VAGRANTFILE
    for package in ("openssh-server", "sudo", "rsync", "systemd-sysv"):
        assert package in box.PACKAGES


def test_the_report_says_which_step_failed_and_is_not_ok() -> None:
    report = vagrant.Report(accel="tcg", accel_why="no usable /dev/kvm")
    assert not report.ok                      # nothing ran: not a pass
    report.steps += [vagrant.Step("vagrant up", True, 312.4), vagrant.Step("the demo", False, 20.0, "exited 1")]
    text = vagrant.text(report)
    assert "accelerator: tcg (no usable /dev/kvm)" in text
    assert "FAILED      20 s  the demo: exited 1" in text
    assert text.endswith("failed")
    report.steps[1].ok = True
    assert report.ok and vagrant.as_json(report)["ok"] is True


def test_the_private_libvirtd_binds_every_directory_it_writes() -> None:
    # Whatever libvirt defines or logs must land in the scratch directory, never the host's.
    for sub, target in vagrant.PRIVATE_DIRS.items():
        assert f"{sub}:{target}" in vagrant.LAUNCH

