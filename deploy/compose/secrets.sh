#!/bin/sh
# Makes the secrets of deploy/docker-compose.yml, once: the cluster's CA,
# a certificate for every server and host (its compose service name is
# its node name and a DNS name of the certificate), a client certificate
# for the operator's CLI, the gossip encryption key, and the secret of
# each host's ACL token. It runs the dmsc image's own `dmsc tls` and `dmsc
# operator keygen` (the image has no shell: one container per command),
# without a network.
#
#   deploy/compose/secrets.sh [DIR]      # make compose-secrets runs it
#
# DIR defaults to $DMSC_SECRETS_DIR, else deploy/compose/secrets (ignored
# by git); the compose file reads the same variable with the same
# default. The image is $DMSC_IMAGE (default dmsc:dev). A file that exists
# already is kept, so running it again only makes what is missing: to
# renew a node's certificate, delete its agent.pem and agent-key.pem, run
# this again and send the agent SIGHUP (deploy/README.md, "Rotating
# certificates").
#
# What it writes, and who reads it:
#
#   dmsc-agent-ca.pem        the CA's certificate: the operator's CLI
#                            (-ca-cert); copied into each node's directory
#   dmsc-agent-ca-key.pem    the CA's key (0600): signing only, never
#                            mounted into a container
#   client-0.pem, client-0-key.pem (0600): the operator's client
#                            certificate (-client-cert, -client-key)
#   gossip.hcl               `encrypt = "KEY"`, the gossip key: every
#                            agent reads it with -config
#   NODE/ca.pem, NODE/agent.pem, NODE/agent-key.pem for each of
#   server-1..3 and host-1..2: the CA and the node's own certificate and
#                            key; the directory is mounted, read-only, as
#                            /etc/dmsc/tls of that node's container alone
#   host-1.token, host-2.token  the secret of each host's ACL token (random,
#                            from `dmsc operator keygen`): mounted as
#                            /etc/dmsc/acl/token of that host alone; the
#                            operator makes the token with it after `dmsc
#                            acl bootstrap` (dmsc acl token create
#                            -secret-file DIR/host-1.token ...)
#
# DIR is made 0700. The agents run as the image's user 65532 and a bind
# mount keeps the host's owners and modes, so what they read (their
# directory, gossip.hcl, their token) is made readable by all: the 0700 directory
# around it keeps out everyone but its owner, root and the Docker daemon.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${DMSC_SECRETS_DIR:-$here/secrets}}
image=${DMSC_IMAGE:-dmsc:dev}

mkdir -p "$dir"
chmod 0700 "$dir"
dir=$(cd "$dir" && pwd)

# dmsc runs one dmsc command of the image in DIR/$1 (DIR itself for "."),
# as the calling user so that the files are theirs.
dmsc() {
	wd=$1
	shift
	docker run --rm --network none --user "$(id -u):$(id -g)" \
		-v "$dir:/secrets" -w "/secrets/$wd" "$image" "$@"
}

if [ ! -e "$dir/dmsc-agent-ca.pem" ]; then
	dmsc . tls ca create >/dev/null
	echo "made the CA: dmsc-agent-ca.pem and its key"
fi
chmod 0600 "$dir/dmsc-agent-ca-key.pem"

# node ROLE NAME: NAME's directory with the CA, a certificate of ROLE for
# NAME (with NAME as a DNS name too, for clients on the compose network)
# and its key.
node() {
	role=$1 name=$2
	mkdir -p "$dir/$name"
	chmod 0755 "$dir/$name"
	if [ ! -e "$dir/$name/ca.pem" ]; then
		cp "$dir/dmsc-agent-ca.pem" "$dir/$name/ca.pem"
	fi
	if [ ! -e "$dir/$name/agent.pem" ] || [ ! -e "$dir/$name/agent-key.pem" ]; then
		rm -f "$dir/$name/$role-$name.pem" "$dir/$name/$role-$name-key.pem"
		dmsc "$name" tls cert create "-$role" -node "$name" -dns "$name" \
			-ca ../dmsc-agent-ca.pem -key ../dmsc-agent-ca-key.pem >/dev/null
		mv "$dir/$name/$role-$name-key.pem" "$dir/$name/agent-key.pem"
		mv "$dir/$name/$role-$name.pem" "$dir/$name/agent.pem"
		echo "made the $role certificate of $name: $name/agent.pem and its key"
	fi
	chmod 0644 "$dir/$name/ca.pem" "$dir/$name/agent.pem" "$dir/$name/agent-key.pem"
}
for s in server-1 server-2 server-3; do node server "$s"; done
for h in host-1 host-2; do node host "$h"; done

if [ ! -e "$dir/client-0.pem" ]; then
	dmsc . tls cert create -client >/dev/null
	echo "made the operator's client certificate: client-0.pem and its key"
fi
chmod 0600 "$dir/client-0-key.pem"

if [ ! -e "$dir/gossip.hcl" ]; then
	key=$(dmsc . operator keygen)
	printf '# The gossip encryption key (dmsc operator keygen): secret.\nencrypt = "%s"\n' "$key" >"$dir/gossip.hcl.tmp"
	mv "$dir/gossip.hcl.tmp" "$dir/gossip.hcl"
	echo "made the gossip key: gossip.hcl"
fi
chmod 0644 "$dir/gossip.hcl"

# A secret per host for its ACL token, made before the cluster exists:
# the host starts with it, and the leader registers the host once the
# operator has made a token with this secret.
for h in host-1 host-2; do
	if [ ! -e "$dir/$h.token" ]; then
		secret=$(dmsc . operator keygen)
		printf '%s\n' "$secret" >"$dir/$h.token.tmp"
		mv "$dir/$h.token.tmp" "$dir/$h.token"
		echo "made the ACL token secret of $h: $h.token"
	fi
	chmod 0644 "$dir/$h.token"
done
echo "secrets in $dir"
