# Sourced by the bench scripts: starts the three-member cluster they all measure.
#
# start_members BIN DIR TOKEN [FLAG...]: members m1..m3 of BIN (QuantyKube or etcd) on
# 127.0.0.1, clients on :12379, :22379, :32379 ($ENDPOINTS) and peers on :12380, :22380,
# :32380, data in DIR/m1..m3 and logs in DIR/m1.log..m3.log, with the extra FLAGs; adds
# their pids to the caller's `pids` array. Returns once a put through `$QK bench`
# succeeds, or 1 after 30 s.
#
# TLS=1: mutual TLS on the client and peer ports, as kubeadm runs etcd. A CA and one
# RSA 2048 certificate for 127.0.0.1 and localhost (server and client use) are made with
# openssl in $TLS_DIR (default DIR/tls) unless already there, so a script that sets
# TLS_DIR once uses the same certificates for every cluster it starts. The members get
# https:// URLs and etcd's TLS flags; $ENDPOINTS are https:// and $BENCH_TLS holds the
# bench's --cacert/--cert/--key, to pass to every `$QK bench` call. Without TLS,
# BENCH_TLS is empty and nothing else changes.
if [ -n "${TLS:-}" ]; then
  ENDPOINTS=https://127.0.0.1:12379,https://127.0.0.1:22379,https://127.0.0.1:32379
else
  ENDPOINTS=127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379
fi
BENCH_TLS=()

# make_certs DIR: DIR/ca.pem, and DIR/member.pem with its key DIR/member-key.pem, signed
# by that CA, valid for 7 days; every member and the bench client use that one pair.
make_certs() {
  local d=$1
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=quantykube-bench-ca \
    -keyout "$d/ca-key.pem" -out "$d/ca.pem" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign &&
    openssl req -new -newkey rsa:2048 -nodes -subj /CN=quantykube-bench-member \
      -keyout "$d/member-key.pem" -out "$d/member.csr" &&
    printf '%s\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment \
      extendedKeyUsage=serverAuth,clientAuth subjectAltName=IP:127.0.0.1,DNS:localhost >"$d/member.ext" &&
    openssl x509 -req -days 7 -in "$d/member.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" \
      -CAcreateserial -extfile "$d/member.ext" -out "$d/member.pem"
}

start_members() {
  local bin=$1 dir=$2 token=$3 cluster="" scheme=http certs i
  local tls_flags=()
  shift 3
  mkdir -p "$dir"
  if [ -n "${TLS:-}" ]; then
    scheme=https
    certs=${TLS_DIR:-$dir/tls}
    if [ ! -s "$certs/member.pem" ]; then
      make_certs "$certs" >"$dir/openssl.log" 2>&1 || { echo "openssl failed; see $dir/openssl.log" >&2; return 1; }
    fi
    tls_flags=(--cert-file "$certs/member.pem" --key-file "$certs/member-key.pem"
      --trusted-ca-file "$certs/ca.pem" --client-cert-auth
      --peer-cert-file "$certs/member.pem" --peer-key-file "$certs/member-key.pem"
      --peer-trusted-ca-file "$certs/ca.pem" --peer-client-cert-auth)
    BENCH_TLS=(--cacert "$certs/ca.pem" --cert "$certs/member.pem" --key "$certs/member-key.pem")
  fi
  for i in 1 2 3; do cluster+="m$i=$scheme://127.0.0.1:${i}2380,"; done
  for i in 1 2 3; do
    "$bin" --name "m$i" --data-dir "$dir/m$i" \
      --listen-client-urls "$scheme://127.0.0.1:${i}2379" --advertise-client-urls "$scheme://127.0.0.1:${i}2379" \
      --listen-peer-urls "$scheme://127.0.0.1:${i}2380" --initial-advertise-peer-urls "$scheme://127.0.0.1:${i}2380" \
      --initial-cluster "${cluster%,}" --initial-cluster-token "$token" --initial-cluster-state new \
      "${tls_flags[@]}" "$@" >"$dir/m$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 150); do
    "$QK" bench put --endpoints "$ENDPOINTS" "${BENCH_TLS[@]}" --total 1 --clients 1 --output json >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

# stop_members [SIGNAL]: sends SIGNAL (KILL unless given; TERM lets a profiler write its
# file) to the caller's `pids`, waits for the script's background jobs, and empties
# `pids`.
stop_members() {
  kill "-${1:-KILL}" "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
}

# finish_work: removes $WORK, or with KEEP=1 keeps it and says where.
finish_work() { if [ -n "${KEEP:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi; }
