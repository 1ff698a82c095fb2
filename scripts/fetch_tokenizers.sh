#!/usr/bin/env bash
# Fetches tokenizer files from the PyPI packages that carry them (no model
# hub needed) into third_party/tokenizers/ (ignored by git; nothing is
# committed). Each package file is pinned and checked against its SHA-256.
#   gpt2.tiktoken      openai-whisper 20250625 (MIT): GPT-2's BPE ranks
#   llama2_sp.model    mistral-common 1.13.1 (Apache-2.0): a Llama-2 style
#                      SentencePiece BPE model (32000 pieces, byte fallback)
#   llama3.tiktoken    llama-models 0.3.0: Llama-3's ranks, under the Llama 3
#                      licence (read it before shipping the file anywhere)
# Prints what it could not fetch and exits 1 if anything is missing.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/third_party/tokenizers"
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=$(command -v python3)
failed=0

# fetch OUT PACKAGE==VERSION FILE SHA256 MEMBER [sdist]
fetch() {
  local out=$1 pkg=$2 file=$3 sha=$4 member=$5 kind=${6:-wheel}
  [[ -s "$dir/$out" ]] && return 0
  local flags=(--only-binary=:all:)
  [[ $kind == sdist ]] && flags=(--no-binary=:all:)
  if ! "$py" -m pip download -q --no-deps "${flags[@]}" -d "$tmp" "$pkg" >/dev/null 2>&1 ||
     ! echo "$sha  $tmp/$file" | sha256sum -c --quiet >/dev/null 2>&1; then
    echo "fetch_tokenizers: could not fetch $pkg (needed for $out)" >&2
    failed=1
    return 0
  fi
  if [[ $kind == sdist ]]; then
    tar -xzf "$tmp/$file" -C "$tmp" "$member" && mv "$tmp/$member" "$dir/$out.part"
  else
    "$py" - "$tmp/$file" "$member" "$dir/$out.part" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[3], "wb") as f:
    f.write(z.read(sys.argv[2]))
PY
  fi
  mv "$dir/$out.part" "$dir/$out" && echo "fetch_tokenizers: $out <- $pkg"
}

fetch gpt2.tiktoken openai-whisper==20250625 openai_whisper-20250625.tar.gz \
  37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96 \
  openai_whisper-20250625/whisper/assets/gpt2.tiktoken sdist
fetch llama2_sp.model mistral-common==1.13.1 mistral_common-1.13.1-py3-none-any.whl \
  98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af mistral_common/data/tokenizer.model.v1
fetch llama3.tiktoken llama-models==0.3.0 llama_models-0.3.0-py3-none-any.whl \
  7f77f78ff13fca09f70d76a376aff6414cd901623fb9d57e69c2f8367a73032f llama_models/llama3/tokenizer.model
exit $failed
