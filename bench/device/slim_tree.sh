#!/usr/bin/env bash
# Lighten the working tree that every lent-GPU call carries (tracked + untracked-not-ignored files count against
# the 64 MiB a call may carry), so the wheel chunks can be large and few:
#   bash bench/device/slim_tree.sh on    # before the carry calls: docs/runs/ leaves the index (files stay on disk)
#   bash bench/device/slim_tree.sh off   # right after them: the index is HEAD's again, nothing to commit
#   bash bench/device/slim_tree.sh status
# `on` untracks docs/runs/ (`git rm -r --cached`) and ignores it through .git/info/exclude; no file is touched; it
# writes bench/device/CARRIED_COMMIT (the commit the copy runs, for provenance there), which `off` removes.
# While it is on, a commit would delete the evidence from main: a pre-commit hook in .git/hooks refuses every
# commit until `off`. No script the lent machine runs reads docs/runs/ (tests/test_slim_tree.py checks that).
# Measured 2026-11-27: the tree as a tar counts it went 52 -> 3.2 MiB, the chunks 17 -> 56 MiB, the carry calls 34 -> 10
# and the carry + install 4.9 -> 2.1 minutes of the session (docs/runs/2026-11-27-h200x4-smollm2-opponents/).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
git_dir="$(git rev-parse --git-dir)"
marker="$git_dir/verl-ext-slim"
exclude="$git_dir/info/exclude"
hook="$git_dir/hooks/pre-commit"
paths=(docs/runs)

# shellcheck disable=SC2016  # the hook's command substitutions run when git runs the hook, not here
hook_text='#!/bin/sh
# written by bench/device/slim_tree.sh on
if [ -f "$(git rev-parse --git-dir)/verl-ext-slim" ]; then
  echo "slim_tree is on: a commit now would delete $(cat "$(git rev-parse --git-dir)/verl-ext-slim") from main; run bash bench/device/slim_tree.sh off first" >&2
  exit 1
fi'

case "${1:-}" in
  on)
    [[ -f "$marker" ]] && { echo "slim_tree: already on ($(cat "$marker"))"; exit 0; }
    if ! git diff --cached --quiet; then
      echo "slim_tree: the index has staged changes; commit or unstage them first" \
        "(off restores the index from HEAD)" >&2
      exit 1
    fi
    if [[ -e "$hook" ]] && ! grep -q "slim_tree.sh" "$hook"; then
      echo "slim_tree: $hook exists and is not ours; not replacing it" >&2
      exit 1
    fi
    for p in "${paths[@]}"; do
      [[ -n "$(git ls-files -- "$p" | head -1)" ]] || { echo "slim_tree: nothing tracked under $p" >&2; exit 1; }
    done
    # the copy the lent machine gets has no .git: this names its code (bench/device/code_commit.sh reads it there)
    bash bench/device/code_commit.sh > bench/device/CARRIED_COMMIT
    mkdir -p "$(dirname "$hook")" "$(dirname "$exclude")"
    printf '%s\n' "$hook_text" > "$hook" && chmod +x "$hook"
    echo "${paths[*]}" > "$marker"
    echo "# slim_tree begin" >> "$exclude"
    for p in "${paths[@]}"; do
      git rm -r -q --cached -- "$p"
      echo "/$p/" >> "$exclude"
    done
    echo "# slim_tree end" >> "$exclude"
    echo "slim_tree: on (${paths[*]} untracked and ignored; commits refused until off)"
    ;;
  off)
    [[ -f "$marker" ]] || { echo "slim_tree: already off"; exit 0; }
    read -r -a paths < "$marker"
    git reset -q -- "${paths[@]}"
    if [[ -f "$exclude" ]]; then sed -i '/^# slim_tree begin$/,/^# slim_tree end$/d' "$exclude"; fi
    rm -f "$marker" bench/device/CARRIED_COMMIT
    echo "slim_tree: off (${paths[*]} tracked again)"
    ;;
  status)
    if [[ -f "$marker" ]]; then echo "on: $(cat "$marker")"; else echo "off"; fi
    ;;
  *)
    echo "usage: $0 on|off|status" >&2
    exit 2
    ;;
esac
