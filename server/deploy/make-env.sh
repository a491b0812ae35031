#!/usr/bin/env bash
# Prints fresh values for the gateway's five secrets (docs/CONTRACTS.md "Starting it") in the env-file
# form docker-compose.yml and server/deploy/gateway.env.example expect: one line each, PEM keys with a
# literal \n between their lines, every value in single quotes, so the same file reads alike in Compose's
# .env (v1 and v2), systemd's EnvironmentFile=, `node --env-file` and a shell's `set -a; . ./.env` (which
# would otherwise turn an unquoted \n into n). Run it once per installation and keep the output secret:
#   (umask 077 && bash server/deploy/make-env.sh > .env)                # docker compose (read by Compose)
#   (umask 077 && bash server/deploy/make-env.sh >> /etc/tunnelgate/gateway.env)   # systemd
# Every replica and the admin CLI need the same values; running it again makes new ones (new sessions,
# new job and SSH keys that every agent would have to be given), so never re-run it over a live install.
set -euo pipefail
command -v openssl >/dev/null || { echo "make-env.sh: needs openssl" >&2; exit 1; }

# A PKCS#8 Ed25519 private key as one line, its line breaks written as \n.
ed25519_one_line() { openssl genpkey -algorithm ed25519 | awk 'NF {printf "%s\\n", $0}'; }

printf "ACCESS_TOKEN_KEY='%s'\n" "$(openssl rand -base64 32)"
printf "COOKIE_KEYS='%s'\n" "$(openssl rand -base64 32)"
printf "SECRET_ENCRYPTION_KEY='%s'\n" "$(openssl rand -base64 32)"
printf "JOB_SIGNING_KEY='%s'\n" "$(ed25519_one_line)"
printf "GATEWAY_SSH_KEY='%s'\n" "$(ed25519_one_line)"
