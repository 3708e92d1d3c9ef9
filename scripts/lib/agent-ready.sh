# shellcheck shell=bash
# Sourced wherever a script starts `garm-edge-agent serve --ready-file FILE`: the one way scripts
# learn that the agent listens and on which ports.

# wait_for_agent_ready PID READY_FILE LOG [TRIES]: waits (TRIES x 0.05 s, default 600) until
# the agent PID has written READY_FILE; sets api_port and guest_url (empty without [guests]).
# Prints the end of LOG and returns 1 when the agent exits or never gets there.
wait_for_agent_ready() {
  local pid=$1 ready=$2 log=$3 tries=${4:-600} i
  for ((i = 0; i < tries; i++)); do
    [ -s "$ready" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  # shellcheck disable=SC2034 # both are the caller's
  api_port=$(sed -n 's/^api_port=//p' "$ready" 2>/dev/null || true)
  # shellcheck disable=SC2034
  guest_url=$(sed -n 's/^guest_url=//p' "$ready" 2>/dev/null || true)
  if [ -z "$api_port" ]; then
    tail -n 60 "$log"
    echo "FAILED: the agent did not start"
    return 1
  fi
}
