#!/bin/bash
# Re-runs the automatable probes of the reliability round (the classes of
# ../shared/reference/reliability-probes-3.md that need no human: daemon refusals, raw
# protocol garbage and slow peers, kill -9 of daemon and clients around put and get,
# stopped daemons, socket squatting, media corruption, programs killed or run past their
# limits, operators that make no progress, the mount's permissions, space and remounts,
# and limits) against the
# csx binary given as $1 (default: target/release/csx). Each probe prints
# "held" or "FELL" with what it saw; the last line counts them. Exit status 1 if any
# fell. Root is needed for the probes run as another user and for the mount (they are
# skipped otherwise, and counted as skipped, never as held); clang for the program probes.
# docs/probes.md maps each of the 101 probes to its case here or to its cargo test.
#
# Everything happens in a scratch directory; every daemon it starts is killed on exit.
set -u
CSX=$(realpath "${1:-target/release/csx}")
[ -x "$CSX" ] || { echo "probes: no csx binary at $CSX (make build)" >&2; exit 2; }
W=$(mktemp -d /tmp/csx-probes.XXXXXX)
export CSX_SHM_DIR="$W/shm"
mkdir -m 700 "$CSX_SHM_DIR"
export CSX_TIMEOUT=5
PIDS=()
HELD=0; FELL=0; SKIPPED=0
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
cd "$W"

held() { HELD=$((HELD + 1)); echo "held  $1"; }
fell() { FELL=$((FELL + 1)); echo "FELL  $1: $2"; }
skip() { SKIPPED=$((SKIPPED + 1)); echo "skip  $1: $2"; }
check() { # check NAME CONDITION-STATUS WHAT-WAS-SEEN
    if [ "$2" -eq 0 ]; then held "$1"; else fell "$1" "$3"; fi
}
# No cause printed twice in one line (": X: X").
not_doubled() {
    python3 -c '
import sys
t = sys.stdin.read().strip()
parts = [p.strip() for p in t.split(": ")]
sys.exit(1 if any(parts[i] and parts[i] == parts[i + 1] for i in range(len(parts) - 1)) else 0)'
}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# serve STATE LISTEN... : starts a daemon, waits until it answers; sets DPID.
serve() {
    local state=$1; shift
    local args=()
    for l in "$@"; do args+=(--listen "$l"); done
    "$CSX" device serve --state "$state" "${args[@]}" --status-interval 0 ${SERVE_EXTRA:-} >>"$W/daemon.log" 2>&1 &
    DPID=$!
    PIDS+=("$DPID")
    for _ in $(seq 100); do
        env ${WAIT_ENV:-} "$CSX" --device "$1" info >/dev/null 2>&1 && return 0
        kill -0 "$DPID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
stop() { kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

"$CSX" device init --state d0 --nvm-size 512MiB >/dev/null 2>&1 || "$CSX" device init --state d0 >/dev/null
P=$(port)
T="tcp://127.0.0.1:$P"
S="shm://probe$$"
serve d0 "$T" "$S" || { echo "probes: the daemon did not start; see $W/daemon.log" >&2; cat "$W/daemon.log"; exit 2; }
D0=$DPID
head -c 3M /dev/urandom >f3
head -c 200M /dev/urandom >big200

# --- 1. daemon -----------------------------------------------------------------------
echo secret-token >token
P2=$(port)
"$CSX" device init --state d1 >/dev/null 2>&1
WAIT_ENV="CSX_TOKEN_FILE=token" SERVE_EXTRA="--token-file token" serve d1 "tcp://127.0.0.1:$P2"; TPID=$DPID
out=$("$CSX" --device "tcp://127.0.0.1:$P2" info 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -qi auth; check "1.1 no token is refused" $? "rc $rc: $out"
out=$(CSX_TOKEN_FILE=missing "$CSX" --device "tcp://127.0.0.1:$P2" info 2>&1)
echo "$out" | grep -q missing && echo "$out" | not_doubled; check "1.2 a missing token file is named, its cause once" $? "$out"
out=$(CSX_TOKEN_FILE=token "$CSX" --device "tcp://127.0.0.1:$P2" info 2>&1); check "1.1 the right token gets in" $? "$out"
: >empty
out=$("$CSX" device serve --state d1 --listen "tcp://127.0.0.1:$(port)" --token-file empty 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "0 bytes" && echo "$out" | not_doubled; check "1.4 an empty token file is refused at start, once" $? "$out"
stop "$TPID"
DPID=$D0

python3 - "$P" <<'EOF'; check "1.6 random bytes and an HTTP GET are cut at once" $? "connection stayed open"
import os, socket, sys, time
for payload in (os.urandom(4096), b"GET / HTTP/1.0\r\n\r\n"):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(payload); s.settimeout(3); t = time.time()
    try:
        while s.recv(4096): pass
    except ConnectionResetError: pass
    if time.time() - t > 2: sys.exit(1)
EOF
python3 - "$P" <<'EOF'; check "1.10 silent, partial and trickling handshakes are cut within 6 s" $? "held past 6 s"
import socket, sys, time, threading
port = int(sys.argv[1]); bad = []
def probe(kind):
    s = socket.create_connection(("127.0.0.1", port)); t = time.time(); s.settimeout(0.7)
    if kind == 1: s.sendall(b"\x00\x00\x00\x00")
    while time.time() - t < 8:
        if kind == 2:
            try: s.send(b"\x00")
            except OSError: return
        try:
            if s.recv(4096) == b"": return
        except socket.timeout: continue
        except OSError: return
    bad.append(kind)
th = [threading.Thread(target=probe, args=(k,)) for k in (0, 1, 2)]
[t.start() for t in th]; [t.join() for t in th]
sys.exit(1 if bad else 0)
EOF
python3 - "$P" >idle.out 2>&1 <<'EOF' &
import socket, sys, time
ss = []
for _ in range(200):
    try: ss.append(socket.create_connection(("127.0.0.1", int(sys.argv[1]))))
    except OSError: pass
time.sleep(3)
EOF
IDLE=$!; sleep 1
out=$("$CSX" --device "$T" info 2>&1); rc=$?
wait $IDLE
[ $rc -ne 0 ] && echo "$out" | grep -q "limit" || [ $rc -eq 0 ]; check "1.11 under 200 idle connections a client is served or told the limit" $? "$out"
sleep 6

for tr in "$T" "$S"; do
    "$CSX" --device "$tr" put f3 /kill/after >/dev/null 2>&1
    stop "$DPID"; serve d0 "$T" "$S"
    "$CSX" --device "$tr" get /kill/after back >/dev/null 2>&1 && cmp -s f3 back
    check "1.17 a put acknowledged over ${tr%%:*} survives a daemon SIGKILL" $? "file lost or different"
done
"$CSX" --device "$T" put big200 /kill/victim >/dev/null 2>&1
"$CSX" --device "$T" put f3 /kill/victim >/dev/null 2>&1 &
CP=$!; sleep 0.15; kill -9 $CP 2>/dev/null; wait $CP 2>/dev/null
"$CSX" --device "$T" get /kill/victim back >/dev/null 2>&1 && { cmp -s back f3 || cmp -s back big200; }
check "1.18 a put killed mid-copy leaves the old file or the new one, whole" $? "$(stat -c %s back 2>/dev/null) bytes"
"$CSX" --device "$T" put big200 /kill/victim >/dev/null 2>&1
"$CSX" --device "$T" put f3 /kill/victim >/dev/null 2>&1 &
CP=$!; sleep 0.1; stop "$DPID"; wait $CP 2>/dev/null; serve d0 "$T" "$S"
"$CSX" --device "$T" get /kill/victim back >/dev/null 2>&1 && { cmp -s back f3 || cmp -s back big200; }
check "1.18 a daemon killed mid-put leaves the old file or the new one, whole" $? "$(stat -c %s back 2>/dev/null) bytes"
"$CSX" --device "$T" put f3 /kill/term >/dev/null 2>&1
kill -TERM "$DPID"; wait "$DPID" 2>/dev/null; serve d0 "$T" "$S"
"$CSX" --device "$T" get /kill/term back >/dev/null 2>&1 && cmp -s back f3; check "1.19 a put survives a SIGTERM" $? "lost"
out=$("$CSX" device serve --state d0 --listen "tcp://127.0.0.1:$(port)" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "in use"; check "1.20 a second daemon on one state is refused" $? "$out"
stop "$DPID"; serve d0 "$T" "$S"; check "1.20 a stale shm socket is replaced" $? "daemon did not start"

if [ "$(id -u)" -eq 0 ] && id nobody >/dev/null 2>&1; then
    Q="$W/squat"; mkdir "$Q"; chown nobody "$Q"; chmod 700 "$Q"
    out=$(CSX_SHM_DIR="$Q" "$CSX" --device shm://x info 2>&1)
    echo "$out" | grep -q "belongs to user" && echo "$out" | grep -q "$Q"; check "1.22 a client refuses a socket directory another user made, naming it" $? "$out"
    out=$(CSX_SHM_DIR="$Q" "$CSX" device serve --state d1 --listen shm://x 2>&1); rc=$?
    [ $rc -ne 0 ] && echo "$out" | grep -q "$Q"; check "1.22 a daemon refuses a socket directory another user made, naming it" $? "$out"
    out=$(su -s /bin/sh nobody -c "CSX_SHM_DIR=$CSX_SHM_DIR $CSX --device $S ls" 2>&1); rc=$?
    [ $rc -ne 0 ]; check "1.21 another user cannot use this user's shm device" $? "$out"
else
    skip "1.21/1.22" "need root and user nobody"
fi

kill -STOP "$DPID"
for tr in "$T" "$S"; do
    start=$(date +%s.%N); out=$("$CSX" --device "$tr" ls 2>&1); rc=$?
    took=$(echo "$(date +%s.%N) - $start" | bc)
    [ $rc -ne 0 ] && [ "$(echo "$took < 15" | bc)" -eq 1 ] && echo "$out" | grep -qi "did not answer\|not answer"
    check "1.24 a stopped daemon (${tr%%:*}) is reported within the timeout" $? "rc $rc after $took s: $out"
done
kill -CONT "$DPID"
"$CSX" --device "$T" put big200 /g/big >/dev/null 2>&1
echo old >local
"$CSX" --device "$T" get /g/big local >/dev/null 2>&1 &
CP=$!; sleep 0.08; kill -STOP "$DPID"; wait $CP; rc=$?; kill -CONT "$DPID"
[ $rc -ne 0 ] && [ "$(cat local)" = old ]; check "1.25 a get from a stopped daemon fails and keeps the local file" $? "rc $rc, local $(stat -c %s local) bytes"
"$CSX" --device "$T" get /g/big local >/dev/null 2>&1 &
CP=$!; sleep 0.08; stop "$DPID"; wait $CP; rc=$?
{ [ $rc -ne 0 ] && [ "$(cat local)" = old ]; } || { [ $rc -eq 0 ] && cmp -s local big200; }
check "1.26 a get whose daemon dies leaves the old local file or the new one" $? "rc $rc, local $(stat -c %s local) bytes"
serve d0 "$T" "$S"
out=$("$CSX" device serve --state d1 --listen "$T" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -qi "in use" && echo "$out" | not_doubled; check "1.27 a port in use is named once" $? "$out"

# --- media corruption: a flipped bit is an error naming file and block -------------------
"$CSX" --device "$T" put f3 /c/f >/dev/null 2>&1
off=$("$CSX" --device "$T" stat /c/f --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["extents"][0]["nvm_offset"])')
stop "$DPID"
python3 - d0/nvm.img "$((off + 5000))" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 4]))
EOF
serve d0 "$T" "$S"
for tr in "$T" "$S"; do
    out=$("$CSX" --device "$tr" get /c/f back2 2>&1); rc=$?
    [ $rc -ne 0 ] && echo "$out" | grep -q "/c/f" && echo "$out" | grep -q "block 1" && [ ! -e back2 ]
    check "checksum: a flipped bit reads as an error naming /c/f block 1 (${tr%%:*})" $? "rc $rc: $out"
done
stop "$DPID"
out=$("$CSX" --device "$W/d0" get /c/f back2 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "block 1"; check "checksum: the same through an embedded device" $? "rc $rc: $out"
serve d0 "$T" "$S"

# --- 3. programs and 4. operators ---------------------------------------------------------
# Small device programs for the probes (built with `csx build`, which needs clang).
cat >inf.c <<'EOC'
#include "csx.h"
CSX_PROGRAM(inf) { volatile unsigned long n = 0; for (;;) n++; return n; }
EOC
cat >sortloop.c <<'EOC'
#include "csx.h"
CSX_PROGRAM(sortloop) { long n = 0;
  for (unsigned long i = 0; i < args->cparam1; i++) { csx_memset(win0, i, win0_len); n += csx_sort_u64(win0, win0_len); }
  return n; }
EOC
cat >again.c <<'EOC'
#include "csx.h"
CSX_PROGRAM(again) { return CSX_OP_AGAIN; }
EOC
BUILT=1
for p in inf sortloop again; do
    "$CSX" build "$p.c" -o "$p.o" >/dev/null 2>build.err || { BUILT=0; cat build.err; }
done
loaded() { "$CSX" device info --device "$1" --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["programs_loaded"])'; }
if [ "$BUILT" -eq 1 ]; then
    before=$(loaded "$T")
    for sig in KILL TERM HUP KILL TERM HUP; do
        "$CSX" exec inf.o --device "$T" --time-limit-ms 3600000 >/dev/null 2>&1 &
        CP=$!; sleep 0.5; kill -"$sig" $CP 2>/dev/null; wait $CP 2>/dev/null
    done
    sleep 0.5
    after=$(loaded "$T")
    [ -n "$after" ] && [ "$after" = "$before" ]; check "3.13 clients killed by KILL, TERM and HUP mid-run leave no program loaded" $? "loaded before $before, after $after"
    head -c 32M /dev/zero >z32; "$CSX" put z32 /p/z32 --device "$T" >/dev/null 2>&1
    start=$(date +%s.%N)
    out=$("$CSX" exec sortloop.o --device "$T" --input /p/z32 --cparam1 2000 --time-limit-ms 100 --engine jit 2>&1); rc=$?
    took=$(echo "$(date +%s.%N) - $start" | bc)
    [ $rc -ne 0 ] && echo "$out" | grep -q "time limit" && [ "$(echo "$took < 10" | bc)" -eq 1 ]
    check "3.14 a JIT loop of long device-function calls stops at its time limit" $? "rc $rc after $took s: $out"
    out=$(timeout 60 "$CSX" vm run inf.o --repeat 1000000 2>&1); rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ]; check "3.16 vm run --repeat stops at the first trap" $? "rc $rc: $out"
    out=$( (ulimit -v 3000000; timeout 60 "$CSX" vm run inf.o --mem-file /dev/zero) 2>&1); rc=$?
    [ $rc -ne 124 ] && ! echo "$out" | grep -qi "memory allocation.*failed\|out of memory"; check "3.17 vm run --mem-file /dev/zero reads a bounded amount" $? "rc $rc: $out"
    out=$("$CSX" vm disasm sortloop.o 2>&1); rc=$?
    [ $rc -eq 0 ] && echo "$out" | grep -q csx_sort_u64; check "3.18 vm disasm names the device functions a program calls" $? "rc $rc: $(echo "$out" | head -3)"
    head -c 1M /dev/urandom >garbage.o
    out=$("$CSX" exec garbage.o --device "$T" 2>&1); rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 100 ] && echo "$out" | not_doubled; check "3.10 a random object is a typed error, each cause once" $? "rc $rc: $out"
    seq 1 100000 | python3 -c 'import sys,struct; sys.stdout.buffer.write(b"".join(struct.pack("<Q", int(l)) for l in sys.stdin))' >nums
    "$CSX" put nums /p/nums --device "$T" >/dev/null 2>&1
    out=$(timeout 60 "$CSX" pipe './again.o' --device "$T" --input /p/nums 2>&1); rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$out" | grep -q "again"; check "4.5 a stage answering AGAIN with no output is stopped, named" $? "rc $rc: $out"
    after=$(loaded "$T"); [ "$after" = "$before" ]; check "4.5 the stopped pipe leaves no program loaded" $? "loaded $after"
    "$CSX" pipe "datagen --size 1TiB | aggregate --text" --device "$T" >/dev/null 2>&1 &
    CP=$!; sleep 1; kill -INT $CP; wait $CP 2>/dev/null; sleep 0.5
    after=$(loaded "$T"); [ "$after" = "$before" ]; check "4.7 Ctrl-C on csx pipe unloads every stage" $? "loaded before $before, after $after"
else
    skip "3.x/4.x program probes" "csx build failed (clang?)"
fi
out=$("$CSX" pipe 'filter --op gt --value -5 | aggregate --text' --device "$T" --input /p/nums 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q -- "-5"; check "4.3 a negative value for a u64 filter is refused, named" $? "rc $rc: $out"
out=$("$CSX" pipe 'frobnicate' --device "$T" --input /p/nums 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q frobnicate && echo "$out" | not_doubled; check "4.2 an unknown operator is named with the list, once" $? "rc $rc: $out"

# --- 2. the mount (root and /dev/fuse) -------------------------------------------------------
if [ "$(id -u)" -eq 0 ] && [ -e /dev/fuse ] && id nobody >/dev/null 2>&1; then
    mkdir -p m
    chmod 755 "$W"
    if "$CSX" mount m --device "$S" >/dev/null 2>&1; then
        echo secret >m/secret; chmod 600 m/secret
        [ "$(stat -c %a m/secret)" = 600 ] && ! su -s /bin/sh nobody -c "cat $W/m/secret" >/dev/null 2>&1
        check "2.14 chmod 600 holds and another user cannot read the file" $? "mode $(stat -c %a m/secret)"
        (umask 077; mkdir m/priv) ; [ "$(stat -c %a m/priv)" = 700 ]; check "2.14 mkdir keeps its mode" $? "mode $(stat -c %a m/priv)"
        head -c 8M /dev/urandom >m/eight
        used=$(df --output=used -k m | tail -1 | tr -d ' ')
        [ "$used" -ge 8000 ]; check "2.12 df counts the bytes stored" $? "used $used KiB"
        out=$(truncate -s 1T m/huge 2>&1); rc=$?
        [ $rc -ne 0 ]; check "2.9 truncate past the device's size is refused" $? "rc $rc: $out; size $(stat -c %s m/huge 2>/dev/null)"
        mkdir m/d; out=$(mv m/d m/d/sub 2>&1); rc=$?; [ $rc -ne 0 ]; check "2.5 a directory moved into itself is refused" $? "$out"
        out=$(mkfifo m/fifo 2>&1); rc=$?; [ $rc -ne 0 ]; check "2.15 mkfifo is refused" $? "$out"
        mkdir -p full; touch full/x
        out=$("$CSX" mount full --device "$S" 2>&1); rc=$?
        [ $rc -ne 0 ] && echo "$out" | grep -q "empty"; check "2.20 a mount on a non-empty directory is refused" $? "rc $rc: $out"
        [ $rc -eq 0 ] && "$CSX" umount full >/dev/null 2>&1
        "$CSX" umount m >/dev/null 2>&1
        torn=0
        for i in 1 2 3 4 5; do
            "$CSX" mount m --device "$S" >/dev/null 2>&1 || torn=$((torn + 1))
            "$CSX" umount m >/dev/null 2>&1
            "$CSX" mount m --device "$S" >/dev/null 2>&1 || torn=$((torn + 1))
            sleep 0.5
            mountpoint -q m || torn=$((torn + 1))
            "$CSX" umount m >/dev/null 2>&1
        done
        [ $torn -eq 0 ]; check "2.19 umount then mount at once, 5 times: every remount holds" $? "$torn failures"
    else
        fell "2.x mount" "csx mount m failed"
    fi
else
    skip "2.x mount probes" "need root, /dev/fuse and user nobody"
fi

# --- 5. arrays, 7. limits ----------------------------------------------------------------
out=$("$CSX" array init --state arr513 --members 513 --nvm-size 16MiB 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q 513; check "7.6 an array of 513 members is refused" $? "$out"
out=$("$CSX" device serve --state d1 --listen "tcp://127.0.0.1:$(port)" --client-slots 65 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q 65; check "7.7 --client-slots 65 is refused" $? "$out"
out=$("$CSX" device serve --state d1 --listen "tcp://127.0.0.1:$(port)" --client-memory 1TiB 2>&1); rc=$?
[ $rc -ne 0 ]; check "7.7 --client-memory 1TiB is refused" $? "$out"

stop "$DPID"
echo "probes: $HELD held, $FELL fell short, $SKIPPED skipped (of $((HELD + FELL + SKIPPED)) run)"
[ "$FELL" -eq 0 ]
