#!/bin/sh
# Run a command while every core is kept busy by a loop of our own (make test-busy):
# the suite must pass on a busy machine, as on a user's laptop or a shared CI runner.
#   scripts/busy.sh COMMAND [ARG...]    exit status: COMMAND's
# HOGS (default: the number of cores) loops run at the same priority as the command.
set -u
hogs=${HOGS:-$(nproc)}
pids=""
i=0
while [ "$i" -lt "$hogs" ]; do
	sh -c 'while :; do :; done' &
	pids="$pids $!"
	i=$((i + 1))
done
trap 'kill $pids 2>/dev/null' EXIT INT TERM
echo "busy.sh: $hogs busy loops beside: $*"
start=$(date +%s)
"$@"
status=$?
echo "busy.sh: exit $status after $(( $(date +%s) - start )) s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
