"""A cluster's plan from an inventory and its hosts' facts, and the slurm.conf it gets
(machine/cluster.py, machine/slurm.config): pure logic, no Ansible run."""
from __future__ import annotations

import pytest

from machine import cluster, slurm
from machine.errors import UserError


def facts(host: str, cpus: int, addr: str | None = "10.0.0.9", mgr: str = "systemd") -> dict:
    f = {"ansible_hostname": host, "ansible_processor_vcpus": cpus, "ansible_service_mgr": mgr}
    if addr:
        f["ansible_default_ipv4"] = {"address": addr}
    return f


def inventory(**groups: list[str]) -> cluster.Inventory:
    hosts = sorted({h for hs in groups.values() for h in hs})
    return cluster.Inventory(hosts, dict(groups), {h: {} for h in hosts})


def test_every_host_is_a_node_and_the_controller_is_named_by_its_group() -> None:
    inv = inventory(all=["a.lab", "b.lab", "c.lab"], slurm_controller=["b.lab"])
    inv.hostvars["c.lab"]["ansible_host"] = "192.168.56.13"
    p = cluster.plan(inv, {"a.lab": facts("a", 8, "10.0.0.1"), "b.lab": facts("b", 4, "10.0.0.2"),
                           "c.lab": facts("c", 2, None)}, "lab")
    assert p.controller == "b.lab" and p.cgroups
    assert p.nodes["c.lab"] == slurm.Node("c", "c", "192.168.56.13", 2)      # the inventory's address
    text = p.config
    assert "SlurmctldHost=b(10.0.0.2)" in text and "ClusterName=lab" in text
    assert "NodeName=a NodeHostname=a NodeAddr=10.0.0.1 CPUs=8 State=UNKNOWN" in text
    assert "PartitionName=startlab Nodes=a,b,c Default=YES" in text
    assert "ProctrackType=proctrack/cgroup" in text and "TaskPlugin=task/cgroup,task/affinity" in text
    assert "StateSaveLocation=/var/lib/slurm/slurmctld" in text and "SlurmUser=slurm" in text


def test_without_systemd_everywhere_tasks_are_tracked_by_process_and_confined_by_affinity() -> None:
    inv = inventory(all=["a", "b"])
    p = cluster.plan(inv, {"a": facts("a", 2), "b": facts("b", 2, "10.0.0.8", mgr="sysvinit")}, "x")
    assert p.controller == "a" and not p.cgroups
    assert "ProctrackType=proctrack/linuxproc" in p.config and "TaskPlugin=task/affinity" in p.config


def test_a_plan_names_what_it_lacks() -> None:
    inv = inventory(all=["a", "b"])
    with pytest.raises(UserError, match="no facts from b"):
        cluster.plan(inv, {"a": facts("a", 2)}, "x")
    with pytest.raises(UserError, match="b: no address"):
        cluster.plan(inv, {"a": facts("a", 2), "b": facts("b", 2, None)}, "x")
    with pytest.raises(UserError, match="share the host name a"):
        cluster.plan(inv, {"a": facts("a", 2), "b": facts("a", 2)}, "x")


def test_the_local_cluster_and_an_inventory_cluster_write_one_kind_of_file() -> None:
    node = slurm.Node("n0", "h", "127.0.0.1", 2)
    layout = slurm.Layout(state="/d/ctld", spool="/d/spool", ctld_pid="/d/c.pid", slurmd_pid="/d/d.pid",
                          ctld_log="/d/c.log", slurmd_log="/d/d.log", slurm_user="root", munge_socket="/d/m.sock")
    text = slurm.config("stl1a", node, [node], layout, (7001, 7002))
    assert "AuthInfo=socket=/d/m.sock" in text and "SlurmctldPort=7001" in text and "SlurmUser=root" in text
    assert "AuthInfo" not in slurm.config("c", node, [node], slurm.SYSTEM_LAYOUT)
    with pytest.raises(ValueError):
        slurm.config("c", node, [], slurm.SYSTEM_LAYOUT)
