#!/usr/bin/env bash
# Fails if a C, C++ or CUDA file (tracked, or new and not ignored) is not formatted by .clang-format.
#   scripts/format_check.sh          check (exit 1 and the files' names if not formatted)
#   scripts/format_check.sh --fix    format them in place
# The version is pinned (clang-format-14, Debian 12's, installed by scripts/setup.sh):
# other versions format some constructs differently.
set -euo pipefail
cd "$(dirname "$0")/.."
FORMAT=clang-format-14
command -v "$FORMAT" >/dev/null || { echo "format_check.sh: $FORMAT not found (run scripts/setup.sh)" >&2; exit 2; }
# Tracked files and new ones git does not ignore (a new file is checked and
# fixed before its first commit).
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cpp' '*.cu' '*.cc')
((${#files[@]})) || { echo "format_check.sh: no C++ files tracked" >&2; exit 2; }
case "${1:-}" in
  --fix) "$FORMAT" -i "${files[@]}"; exit 0 ;;
  "") ;;
  *) echo "format_check.sh: unknown argument '$1' (use --fix or nothing)" >&2; exit 2 ;;
esac
bad=()
for f in "${files[@]}"; do
  "$FORMAT" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "format_check.sh: ${#bad[@]} file(s) not formatted (scripts/format_check.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format_check.sh: ${#files[@]} files formatted"
