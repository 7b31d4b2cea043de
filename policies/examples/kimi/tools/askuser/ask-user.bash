#!/bin/bash
# ask-user: the seed's kimi-style "ask the user" tool (registers as bash_ask_user).
#
# No user is attached to a sandboxed worker, so this example answers every question with a canned reply that tells
# the agent to carry on with its own best judgement. Replace the `run` branch with a real channel to a user.

set -euo pipefail

case "${1:-}" in
  describe)
    cat <<'DESCRIBE_EOF'
{
  "slug": "ask-user",
  "description": "Ask the user a question and wait for the answer. Use it only when you cannot go on without a decision from the user.",
  "args": [
    {
      "name": "question",
      "description": "The question to ask, in one or two sentences",
      "type": "string",
      "backing_type": "string",
      "arity": "single",
      "mode": "dashdashspace"
    }
  ],
  "empty-result": {"tag": "AddMessage", "contents": "--no answer--"}
}
DESCRIBE_EOF
    ;;
  run)
    shift
    question=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --question) question="${2:-}"; shift 2 ;;
        *) echo "ask-user: unexpected argument: $1" >&2; exit 2 ;;
      esac
    done
    if [ -z "$question" ]; then
      echo "ask-user: --question is required" >&2
      exit 2
    fi
    printf 'No user is available to answer "%s". Proceed with your best judgement and state the assumptions you make.\n' "$question"
    ;;
  *)
    echo "Usage: ask-user <describe|run>" >&2
    exit 1
    ;;
esac
