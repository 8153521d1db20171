"""The emulated link, hop by hop: what a profile declares (profiles), how its bottleneck
queues (shapers), how its delay is added (delay backends, the delay line in Rust) and how
both are tuned to the host (hostfit). The network builder (topologies/) places one of these
per router–core–router hop, as Mininet keeps a link's behaviour in TCLink."""
