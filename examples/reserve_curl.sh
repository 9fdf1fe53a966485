#!/usr/bin/env bash
# The reservation a Rust server makes over the daemon's Unix socket, done with curl.
#
#   examples/reserve_curl.sh TREE SIZE [OWNER_PID]
#
# Prints the reservation (HTTP 201) and releases it; a refusal is HTTP 507 with the numbers
# (requested, free, floor, reserved, shortfall), and this script then exits 75.
set -euo pipefail
tree=$1
size=$2
owner=${3:-$$}
sock=$(janitor paths --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["socket"])')
body=$(printf '{"tree": "%s", "bytes": "%s", "job": "curl-example", "owner_pid": %d}' \
    "$tree" "$size" "$owner")
reply=$(curl -sS --unix-socket "$sock" -w '\n%{http_code}' \
    -H 'content-type: application/json' -d "$body" http://janitor/v1/reservations)
code=${reply##*$'\n'}
json=${reply%$'\n'*}
echo "$json"
case $code in
    201)
        id=$(printf '%s' "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
        curl -sS --unix-socket "$sock" -X DELETE "http://janitor/v1/reservations/$id" >/dev/null
        echo "released $id" >&2 ;;
    507) echo "refused: not enough space" >&2; exit 75 ;;
    *) echo "error: HTTP $code" >&2; exit 2 ;;
esac
