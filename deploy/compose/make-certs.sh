#!/usr/bin/env bash
# Makes the certificates deploy/compose/tls.yml mounts, with openssl: a CA, and for each
# member qk-N one certificate for both its client and peer ports (server and client use,
# SANs qk-N, localhost and 127.0.0.1), plus a client certificate for etcdctl on the host.
#
#   deploy/compose/make-certs.sh [MEMBERS]     # MEMBERS defaults to 5 (qk-0 .. qk-4)
#
# Writes into ${CERTS_DIR:-deploy/compose/certs}: ca.crt, client.crt, client.key, and
# qk-N/{ca.crt,tls.crt,tls.key} (the layout the chart's pods see under
# /etc/quantykube/tls/client and /peer). Keeps an existing CA. Test material: the keys
# are not encrypted. Members run as 65532, so the keys are made readable by it (owned by
# 65532 when run as root, world-readable otherwise).
set -euo pipefail
members=${1:-5}
dir=${CERTS_DIR:-"$(dirname "$0")/certs"}
days=${DAYS:-3650}
mkdir -p "$dir"
printf '*\n' >"$dir/.gitignore"
cd "$dir"

if [ ! -f ca.key ] || [ ! -f ca.crt ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days "$days" -sha256 \
    -keyout ca.key -out ca.crt -subj "/CN=quantykube compose CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

# issue NAME SANS EKU: NAME.key and NAME.crt signed by the CA.
issue() {
  local name=$1 sans=$2 eku=$3 ext
  ext=$(mktemp)
  cat >"$ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku
subjectAltName=$sans
EXT
  openssl req -new -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" \
    -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days "$days" -sha256 -extfile "$ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$ext"
}

for ((i = 0; i < members; i++)); do
  m=qk-$i
  issue "$m" "DNS:$m,DNS:localhost,IP:127.0.0.1" "serverAuth,clientAuth"
  mkdir -p "$m"
  cp ca.crt "$m/ca.crt"
  mv "$m.crt" "$m/tls.crt"
  mv "$m.key" "$m/tls.key"
done
issue client "DNS:localhost,IP:127.0.0.1" "clientAuth"

chmod 0644 ./*.crt qk-*/*.crt
chmod 0600 ca.key client.key
if [ "$(id -u)" = 0 ]; then
  chown 65532:65532 qk-*/tls.key
  chmod 0400 qk-*/tls.key
else
  chmod 0644 qk-*/tls.key
fi
echo "certificates in $(pwd)" >&2
