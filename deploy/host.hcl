# dmsc host agent: a machine that carries devices. It never votes; it joins
# the gossip pool and reports its inventory to the servers.
#
#   dmsc agent -config /etc/dmsc/host.hcl
#
# or, without a file:
#
#   dmsc agent -host -join 10.0.0.11 -discover nvidia,cpu,memory

node_name = "gpu-node-1"   # becomes the host id in the scheduler
bind_addr = "0.0.0.0"
http_addr = "127.0.0.1:4646"
join      = ["10.0.0.11", "10.0.0.12", "10.0.0.13"]

host {
  enabled = true

  # Static devices (see devices.example.json) and/or discovery; both may be
  # used together. Device ids must be unique in the cluster.
  devices_file = "/etc/dmsc/devices.json"
  discover     = ["nvidia", "cpu", "memory"]
  nvidia_smi   = "nvidia-smi"   # looked up on PATH

  reserve_memory_gb  = 8        # kept back from discovered memory
  inventory_interval = "30s"    # re-read to notice changed devices

  # Added to every device of this host; requests can require or avoid them.
  labels = {
    rack = "r12"
    zone = "eu-west-1a"
  }
}
