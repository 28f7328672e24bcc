#!/usr/bin/env bash
# A cold-start model (the recipe's sft_hf folder, ~270 MB for SmolLM2 in bf16) as checksummed parts that fit the
# device tool's transfers, so that a later session starts GRPO from it instead of repeating the SFT (a whole-game
# cold start is ~12 of a session's 30 minutes). Both directions have limits:
# - back from a lent machine: at most 8 files of 16 MiB, 64 MiB together, per call;
# - into one: 64 MiB per call with the working tree (~3 MiB with bench/device/slim_tree.sh on).
# Parts of 15 MiB fit both: four to a call back (60 MiB), three to a carry call (45 MiB beside the tree).
#   pack SRC_DIR PARTS_DIR BASE_ENV   tar SRC_DIR (as sft_hf) and a PROVENANCE file (the base run file's name, the
#                                     checkout's commit, the date, the SFT's stage time, the packed folder and, for
#                                     a run's merged GRPO model, its grpo.done) into parts, with SHA256SUMS
#   out PARTS_DIR OUT GROUP [NAME]    copy group GROUP (0, 1, ...: four parts; group 0 also SHA256SUMS and
#                                     PROVENANCE) into OUT/NAME/ (default coldstart) and say how many groups there are
#   carry PARTS_DIR CARRY_DIR         lay the parts out as CARRY_DIR/001, 002, ...: three parts a folder (one
#                                     carry call each; 001 also SHA256SUMS and PROVENANCE)
#   assemble PARTS_DIR DEST_DIR       check every part and the whole archive, then unpack DEST_DIR/sft_hf and
#                                     DEST_DIR/PROVENANCE
# The driver takes the result as COLD_START_FROM=DEST_DIR/sft_hf (bench/learning/gpu_shared_cold_start.sh). A run's
# merged GRPO model kept the same way (the driver's KEEP_RUN_MODELS=1) starts a later session's GRPO where that run
# ended: it is packed with the same base file, and its PROVENANCE names the run and its steps.
set -euo pipefail

PART_BYTES=$((15 * 1024 * 1024))
PARTS_PER_GROUP=4
PARTS_PER_CARRY=3

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

parts_of() {  # the part files of PARTS_DIR, in order
  compgen -G "$1/coldstart.tar.*" | sort || true
}

pack() {
  local src="$1" parts="$2" base_env="$3" stage commit
  [[ -f "$src/config.json" ]] || { echo "pack: $src has no config.json (not a Hugging Face model folder)" >&2; exit 2; }
  stage="$(mktemp -d)"
  cp -al "$src" "$stage/sft_hf" 2>/dev/null || cp -a "$src" "$stage/sft_hf"
  commit="$(bash "$(dirname "${BASH_SOURCE[0]}")/code_commit.sh")"
  {
    echo "base_env=$(basename "$base_env")"
    echo "commit=$commit"
    echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "sft_stage=$(cat "$(dirname "$src")/sft.done" 2>/dev/null || echo unknown)"
    echo "source=$(basename "$(dirname "$src")")/$(basename "$src")"
    if [[ "$(basename "$src")" == grpo_hf && -f "$(dirname "$src")/grpo.done" ]]; then
      echo "grpo_stage=$(head -n 1 "$(dirname "$src")/grpo.done")"
    fi
  } > "$stage/PROVENANCE"
  rm -rf "$parts" && mkdir -p "$parts"
  cp "$stage/PROVENANCE" "$parts/PROVENANCE"
  tar cf - -C "$stage" sft_hf PROVENANCE | split -b "$PART_BYTES" -d -a 3 - "$parts/coldstart.tar."
  rm -rf "$stage"
  (cd "$parts" && sha256sum coldstart.tar.* > SHA256SUMS \
    && echo "$(cat coldstart.tar.* | sha256sum | cut -d' ' -f1)  coldstart.tar" >> SHA256SUMS)
  echo "pack: $(parts_of "$parts" | wc -l) parts of <= 15 MiB in $parts ($(groups "$parts") groups)"
}

groups() {
  local count
  count="$(parts_of "$1" | wc -l)"
  echo $(( (count + PARTS_PER_GROUP - 1) / PARTS_PER_GROUP ))
}

out() {
  local parts="$1" out="$2" group="$3" name="${4:-coldstart}" total
  [[ "$group" =~ ^[0-9]+$ ]] || { echo "out: GROUP is a number (0, 1, ...), got '$group'" >&2; exit 2; }
  [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "out: NAME is a folder name (letters, digits, . _ -), got '$name'" >&2; exit 2; }
  total="$(groups "$parts")"
  (( group < total )) || { echo "out: group $group of $total does not exist (0 to $((total - 1)))" >&2; exit 2; }
  mkdir -p "$out/$name"
  parts_of "$parts" | sed -n "$((group * PARTS_PER_GROUP + 1)),$(((group + 1) * PARTS_PER_GROUP))p" \
    | xargs -r cp -t "$out/$name/"
  if (( group == 0 )); then cp "$parts/SHA256SUMS" "$parts/PROVENANCE" "$out/$name/"; fi
  echo "out: group $group of $total (0 to $((total - 1))) in $out/$name"
}

carry() {
  local parts="$1" carry_dir="$2" index=0 folder part
  rm -rf "$carry_dir"
  while read -r part; do
    folder="$carry_dir/$(printf '%03d' $((index / PARTS_PER_CARRY + 1)))"
    mkdir -p "$folder" && cp "$part" "$folder/"
    index=$((index + 1))
  done < <(parts_of "$parts")
  cp "$parts/SHA256SUMS" "$parts/PROVENANCE" "$carry_dir/001/"
  echo "carry: $(( (index + PARTS_PER_CARRY - 1) / PARTS_PER_CARRY )) folders in $carry_dir (one carry call each;" \
    "copy every folder's files into one PARTS_DIR)"
}

assemble() {
  local parts="$1" dest="$2" count
  [[ -f "$parts/SHA256SUMS" ]] || { echo "assemble: $parts/SHA256SUMS is missing (it comes with group 0)" >&2; exit 2; }
  count="$(grep -c ' coldstart.tar\.[0-9]*$' "$parts/SHA256SUMS")"
  if [[ "$(parts_of "$parts" | wc -l)" != "$count" ]]; then
    echo "assemble: $parts holds $(parts_of "$parts" | wc -l) of the $count parts SHA256SUMS names" >&2
    exit 1
  fi
  (cd "$parts" && grep ' coldstart.tar\.[0-9]*$' SHA256SUMS | sha256sum -c --quiet) \
    || { echo "assemble: a part in $parts does not match SHA256SUMS" >&2; exit 1; }
  local whole
  whole="$(cd "$parts" && cat coldstart.tar.* | sha256sum | cut -d' ' -f1)"
  grep -q "^$whole  coldstart.tar$" "$parts/SHA256SUMS" \
    || { echo "assemble: the parts of $parts join to an archive whose sha256 is not in SHA256SUMS" >&2; exit 1; }
  mkdir -p "$dest" && rm -rf "$dest/sft_hf"
  (cd "$parts" && cat coldstart.tar.*) | tar xf - -C "$dest"
  echo "assemble: $dest/sft_hf ($(grep '^base_env=' "$dest/PROVENANCE"))"
}

(( $# >= 1 )) || usage
command="$1"
shift
case "$command" in
  pack) (( $# == 3 )) || usage; pack "$@" ;;
  out) (( $# == 3 || $# == 4 )) || usage; out "$@" ;;
  carry) (( $# == 2 )) || usage; carry "$@" ;;
  assemble) (( $# == 2 )) || usage; assemble "$@" ;;
  *) usage ;;
esac
