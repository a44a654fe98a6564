# dmsc server agent: one of three (or five) Raft voters.
#
#   dmsc agent -config /etc/dmsc/server.hcl
#
# Every key can also be given as a flag or a DMSC_* environment variable
# (`dmsc agent -h` lists them); a flag beats the environment, which beats
# this file. The same file works for the first start, restarts and adding a
# server to a running cluster.

node_name = "server-1"                # unique and stable; default: short hostname
data_dir  = "/var/lib/dmsc"           # Raft log, stable store, snapshots
bind_addr = "0.0.0.0"                 # cluster ports listen here
# advertise_addr = "10.0.0.11"        # default: the first private IP
http_addr = "0.0.0.0:4646"            # HTTP API
log_level = "info"

# Gossip addresses of the servers (port 4649 when left out). Retried until
# one answers.
join           = ["10.0.0.11", "10.0.0.12", "10.0.0.13"]
retry_interval = "2s"

ports {
  rpc    = 4647   # node-to-node RPC (forwarded writes, inventories)
  raft   = 4648   # Raft
  gossip = 4649   # memberlist, TCP and UDP
}

server {
  enabled          = true
  bootstrap_expect = 3

  # Raft timing for a LAN; a lost leader is replaced in about a second.
  heartbeat_timeout    = "500ms"
  election_timeout     = "500ms"
  leader_lease_timeout = "250ms"

  snapshot_threshold = 8192
  snapshot_interval  = "30s"
  trailing_logs      = 10240
  snapshot_retain    = 2

  tick_interval     = "5s"   # the leader advances time at least this often
  host_down_grace   = "30s"  # a host gone this long is marked down
  dead_server_grace = "10m"  # a failed server gone this long leaves the Raft configuration
  no_leader_hold    = "5s"   # a write waits this long for a leader
}
