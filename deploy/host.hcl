# dmsc host agent: a machine that carries devices. It never votes; it joins
# the gossip pool and reports its inventory to the servers.
#
#   dmsc agent -config /etc/dmsc/host.hcl   # with DMSC_ENCRYPT set: see below
#
# Secured like the servers: its own host certificate (the servers take
# this host's devices only from a certificate that names it), HTTPS on its
# API, ACL tokens (its own token lets the leader register its devices),
# and encrypted gossip with the key in DMSC_ENCRYPT
# (/etc/dmsc/dmsc.env, mode 0600; see systemd/dmsc.env), which is kept
# out of this file because any local user may read it. deploy/README.md
# says how to make and rotate the certificates and the key.

node_name = "gpu-node-1"   # becomes the host id in the scheduler
bind_addr = "0.0.0.0"
http_addr = "127.0.0.1:4646"
join      = ["10.0.0.11", "10.0.0.12", "10.0.0.13"]

# Where the gossip keyring persists, so that a key rotated with `dmsc
# operator keyring` survives a restart (a host has no data_dir).
keyring_file = "/var/lib/dmsc/keyring"

# This host's certificate (dmsc tls cert create -host -node gpu-node-1),
# its key (readable by the dmsc user alone) and the cluster's CA. Replace
# them in place and send SIGHUP (systemctl reload dmsc) to renew them.
tls {
  ca_file   = "/etc/dmsc/tls/dmsc-agent-ca.pem"
  cert_file = "/etc/dmsc/tls/agent.pem"
  key_file  = "/etc/dmsc/tls/agent-key.pem"

  verify_incoming        = true   # the RPC takes only certificates of the CA, by role
  verify_server_hostname = true   # servers dialed must show a server's certificate
  # The API listens on loopback only, but it forwards the writes it takes
  # (allocations) to the leader under this host's certificate: without a
  # client certificate of the CA, any local user could allocate through it.
  verify_https_client = true
}

# ACLs on, as on the servers. The leader registers this host's devices
# only with a token whose policy has host_register = ["gpu-node-1"]. Its
# secret is read from a file (root-owned, readable by the dmsc group
# alone), so that it is in no config file, environment or command line.
# Make the secret before the host starts, even before the cluster is
# bootstrapped (dmsc operator keygen > gpu-node-1.token, or uuidgen): the
# leader keeps trying the host, and registers it once the operator has
# made its token with that secret (dmsc acl token create -secret-file
# gpu-node-1.token ...; deploy/README.md, "ACLs"). A new secret takes
# effect at the agent's restart.
acl {
  enabled    = true
  token_file = "/etc/dmsc/acl/token"
}

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
