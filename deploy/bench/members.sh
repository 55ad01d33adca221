# Sourced by the bench scripts: starts the three-member cluster they all measure.
#
# start_members BIN DIR TOKEN [FLAG...]: members m1..m3 of BIN (QuantyKube or etcd) on
# 127.0.0.1, clients on :12379, :22379, :32379 ($ENDPOINTS) and peers on :12380, :22380,
# :32380, data in DIR/m1..m3 and logs in DIR/m1.log..m3.log, with the extra FLAGs; adds
# their pids to the caller's `pids` array. Returns once a put through `$QK bench`
# succeeds, or 1 after 30 s.
ENDPOINTS=127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379

start_members() {
  local bin=$1 dir=$2 token=$3 cluster="" i
  shift 3
  for i in 1 2 3; do cluster+="m$i=http://127.0.0.1:${i}2380,"; done
  mkdir -p "$dir"
  for i in 1 2 3; do
    "$bin" --name "m$i" --data-dir "$dir/m$i" \
      --listen-client-urls "http://127.0.0.1:${i}2379" --advertise-client-urls "http://127.0.0.1:${i}2379" \
      --listen-peer-urls "http://127.0.0.1:${i}2380" --initial-advertise-peer-urls "http://127.0.0.1:${i}2380" \
      --initial-cluster "${cluster%,}" --initial-cluster-token "$token" --initial-cluster-state new \
      "$@" >"$dir/m$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 150); do
    "$QK" bench put --endpoints "$ENDPOINTS" --total 1 --clients 1 --output json >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}
