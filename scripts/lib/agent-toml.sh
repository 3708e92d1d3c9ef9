# shellcheck shell=bash
# Config pieces every fixture writes the same way (the demo, the benchmarks, the system tiers).

# The [api] section: mutual TLS on a free loopback port with the certificates that
# `garm-edge-agent pki init` made in PKI_DIR, and garm's client identity for CONTROLLER.
agent_api_toml() {  # PKI_DIR CONTROLLER
  cat <<TOML
[api]
address = "127.0.0.1"
port = 0
ca = "$1/ca.crt"
certificate = "$1/agent.crt"
key = "$1/agent.key"
[[api.clients]]
identity = "garm"
controllers = ["$2"]
TOML
}

# garm-provider-edge's config for one agent NAME on localhost:PORT, with garm's certificate
# from PKI_DIR and its TLS sessions kept in SESSION_DIR.
provider_toml() {  # NAME PORT PKI_DIR SESSION_DIR
  mkdir -p "$4"
  cat <<TOML
session_dir = "$4"
[[agents]]
name = "$1"
url = "https://localhost:$2"
ca = "$3/ca.crt"
certificate = "$3/clients/garm.crt"
key = "$3/clients/garm.key"
TOML
}
