#!/usr/bin/env bash
# Prints an agent's AGENT_JOB_KEY value (docs/CONTRACTS.md "Agent configuration") for the gateway
# job-signing key(s) given on standard input: one JOB_SIGNING_KEY value per line, as .env or gateway.env
# holds it (one line, literal \n, optionally in single quotes). Out comes each key's public half as an
# SPKI PEM, all on one line with literal \n. Two keys in, two PEM blocks out: what agents trust while the
# key is rotated (docs/OPERATOR.md "Rotating the job-signing key"). Only public keys are printed.
#   grep '^JOB_SIGNING_KEY=' .env | cut -d= -f2- | bash server/deploy/agent-job-key.sh
set -euo pipefail
command -v openssl >/dev/null || { echo "agent-job-key.sh: needs openssl" >&2; exit 1; }
n=0
while IFS= read -r line || [[ -n $line ]]; do
  line=${line#\'}
  line=${line%\'}
  [[ -z $line ]] && continue
  n=$((n + 1))
  # %b turns the literal \n back into line breaks; openssl derives the public key and checks the private one.
  printf '%b\n' "$line" | openssl pkey -pubout || { echo "agent-job-key.sh: line $n is not a private key openssl can read" >&2; exit 1; }
done | awk 'NF {printf "%s\\n", $0} END {print ""}'
