# dmsc server agent: one of three (or five) Raft voters.
#
#   dmsc agent -config /etc/dmsc/server.hcl   # with DMSC_ENCRYPT set: see below
#
# Every key can also be given as a flag or a DMSC_* environment variable
# (`dmsc agent -h` lists them); a flag beats the environment, which beats
# this file. The same file works for the first start, restarts and adding a
# server to a running cluster.
#
# Secured: mutual TLS on Raft and the node RPC, HTTPS on the API (the tls
# block below), ACL tokens on every API request (the acl block), and
# encrypted gossip. The gossip key is not in this file,
# which any local user may read: it is DMSC_ENCRYPT in /etc/dmsc/dmsc.env
# (mode 0600; see systemd/dmsc.env), read by systemd before the agent
# starts. deploy/README.md says how to make and rotate the certificates
# and the key.

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

# This server's certificate (dmsc tls cert create -server -node server-1),
# its key (readable by the dmsc user alone) and the cluster's CA: the same
# paths on every server, each holding that server's own files. Replace
# them in place and send SIGHUP (systemctl reload dmsc) to renew them.
tls {
  ca_file   = "/etc/dmsc/tls/dmsc-agent-ca.pem"
  cert_file = "/etc/dmsc/tls/agent.pem"
  key_file  = "/etc/dmsc/tls/agent-key.pem"

  # Raft and the node RPC take only certificates of the CA, and each call
  # only from the roles allowed to make it.
  verify_incoming = true
  # A server this node dials must show a server's certificate, of the
  # server's own name where it is known.
  verify_server_hostname = true
  # The API listens on every interface (above): only clients with a
  # certificate of the CA (dmsc tls cert create -client) reach it at all,
  # and ACL tokens (below) say what each may do. Clients give the
  # certificate with -client-cert and -client-key (DMSC_CLIENT_CERT,
  # DMSC_CLIENT_KEY).
  verify_https_client = true
}

# Every API request needs a token whose policies grant its route's
# capability (docs/api.md); one without a token is the anonymous token's,
# which may do nothing until given policies. The same on every server.
# Once the servers are up: dmsc acl bootstrap, once, for the management
# token (deploy/README.md, "ACLs"). /v1/health and /v1/ready (the health
# checks) need no token.
acl {
  enabled = true
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
  request_timeout   = "1s"   # and this long for a leader that does not answer (2x election_timeout)
}
