"""startlab's BPF programs (C sources, built by build.sh) and their bpftool loader."""
