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

# What garm hands CreateInstance on stdin for runner NAME of pool POOL: Linux amd64 on the
# `small` flavor and the `debian-12` image, with the runner download a guest would fetch.
garm_bootstrap() {  # NAME POOL
  printf '{"name":"%s","tools":[{"os":"linux","architecture":"x64","download_url":"https://github.com/actions/runner/releases/download/v2.321.0/actions-runner-linux-x64-2.321.0.tar.gz","filename":"actions-runner-linux-x64-2.321.0.tar.gz","sha256_checksum":"ba46ba7ce3a4d7236b16fbe44419fb453bc08f866b24f04d549ec89f1722a29e"}],"repo_url":"https://github.com/example","callback-url":"https://garm.example/api/v1/callbacks","metadata-url":"https://garm.example/api/v1/metadata","instance-token":"t","ssh-keys":null,"extra_specs":{},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"small","image":"debian-12","labels":null,"pool_id":"%s","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}}' "$1" "$2"
}

# The proxy variables garm passes its providers (those set in garm's own environment), as
# NAME=VALUE words in the array garm_proxy_env, for `env -i` beside the GARM_* variables.
garm_proxy_env=()
for garm_proxy_name in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!garm_proxy_name+set}" ] && garm_proxy_env+=("$garm_proxy_name=${!garm_proxy_name}")
done
unset garm_proxy_name
