#!/bin/sh
# The certificates of deploy/certificates/cert-manager.yaml, for a cluster without cert-manager:
# a CA, a3fast's server certificate and the `a3fast` scheduler's client certificate, made with
# openssl into DIR (default ./a3fast-certificates), and the kubectl commands that make the Secrets.
#
#   sh deploy/certificates/make-certificates.sh [DIR]            # files, and the commands printed
#   sh deploy/certificates/make-certificates.sh --apply [DIR]    # ... and run (needs kubectl)
#   sh deploy/certificates/make-certificates.sh --new-ca [DIR]   # a new CA even where DIR has one
#
# Run again on the same DIR, it renews: new server and client certificates from the CA and token
# already there (DIR/ca.key, DIR/ca.crt, DIR/token), so every client keeps trusting a3fast and the
# /v1 token stays; with --new-ca, a new CA (then roll both Deployments: each side trusts the CA it
# was given). The commands create each Secret or update it in place (`kubectl apply`), so --apply
# runs again without a conflict.
#
# Secrets (namespace a3fast-system; tls.crt, tls.key, ca.crt each):
#   a3fast-tls               server certificate, SANs below; ca.crt: the CA (a3fast's --tls-client-ca)
#   a3fast-scheduler-client  client certificate (CN a3fast-scheduler); ca.crt: the CA (verifies a3fast)
#   a3fast-token             token: a random bearer token for the /v1 API
# Keep DIR/ca.key safe (or delete it: the next run then makes a new CA): it can issue certificates
# a3fast accepts.
set -eu

apply=no
new_ca=no
while [ $# -gt 0 ]; do
  case "$1" in
    --apply) apply=yes; shift ;;
    --new-ca) new_ca=yes; shift ;;
    --) shift; break ;;
    -*) echo "make-certificates.sh: unknown option $1 (--apply, --new-ca, then DIR)" >&2; exit 2 ;;
    *) break ;;
  esac
done
dir=${1:-./a3fast-certificates}
namespace=a3fast-system
days=${DAYS:-90}
mkdir -p "$dir"
umask 077

if [ "$new_ca" = yes ] || [ ! -s "$dir/ca.key" ] || [ ! -s "$dir/ca.crt" ]; then
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" -days 3650 -subj "/CN=a3fast-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
  -keyout "$dir/server.key" -out "$dir/server.csr" -subj "/CN=a3fast.$namespace.svc" 2>/dev/null
cat > "$dir/server.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:a3fast,DNS:a3fast.$namespace,DNS:a3fast.$namespace.svc,DNS:a3fast.$namespace.svc.cluster.local
EXT
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -out "$dir/server.crt" -days "$days" -extfile "$dir/server.ext" 2>/dev/null

openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
  -keyout "$dir/client.key" -out "$dir/client.csr" -subj "/CN=a3fast-scheduler" 2>/dev/null
cat > "$dir/client.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EXT
openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -out "$dir/client.crt" -days "$days" -extfile "$dir/client.ext" 2>/dev/null

if [ ! -s "$dir/token" ]; then
  openssl rand -hex 32 > "$dir/token"
fi
rm -f "$dir/server.csr" "$dir/client.csr" "$dir/server.ext" "$dir/client.ext" "$dir/ca.srl"

# DIR as one shell word, whatever it holds (a quote closed, an escaped quote, the quote opened again)
d="'$(printf '%s' "$dir" | sed "s/'/'\\\\''/g")'"
update="--dry-run=client -o yaml | kubectl apply -f -"
commands="kubectl -n $namespace create secret generic a3fast-tls --from-file=tls.crt=$d/server.crt --from-file=tls.key=$d/server.key --from-file=ca.crt=$d/ca.crt $update
kubectl -n $namespace create secret generic a3fast-scheduler-client --from-file=tls.crt=$d/client.crt --from-file=tls.key=$d/client.key --from-file=ca.crt=$d/ca.crt $update
kubectl -n $namespace create secret generic a3fast-token --from-file=token=$d/token $update"

if [ "$apply" = yes ]; then
  printf '%s\n' "$commands" | while read -r line; do sh -c "$line"; done
else
  printf '%s\n' "$commands"
fi
