#!/usr/bin/env bash
# Installs the Debian packages the trainer needs, skipping those present.
#   scripts/setup.sh          build + run (compiler, ccache, CMake, MPI, HDF5, toml++, OpenBLAS)
#   scripts/setup.sh test     also GoogleTest, the PyTorch/h5py reference stack and
#                             Slurm + munge (a real single-node Slurm for tests/e2e/slurm_check.py),
#                             and Chromium (renders `trainer report`'s page headless in a test)
# Where the CUDA toolkit is installed (nvcc), it also fetches the cuDNN C++
# frontend headers the CUDA backend compiles against (not in Debian): a pinned
# wheel from PyPI, checked against its SHA-256, unpacked into third_party/.
set -euo pipefail

pkgs=(g++ cmake ninja-build openmpi-bin libopenmpi-dev libhdf5-openmpi-dev
      libtomlplusplus-dev libopenblas-openmp-dev nlohmann-json3-dev pkg-config zlib1g-dev
      libpcre2-dev libsentencepiece-dev ccache)
if [[ "${1:-}" == "test" ]]; then
  pkgs+=(libgtest-dev hdf5-tools python3-h5py python3-numpy python3-torch slurm-wlm munge python3-venv python3-pip
        chromium fonts-dejavu-core)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# fetch_headers PACKAGE VERSION WHEEL SHA256 FOLDER DEST [pip download options]:
# the headers of a pinned wheel from PyPI, checked against its SHA-256: the
# wheel's FOLDER becomes DEST/include (DEST/VERSION says which version); when
# the fetch fails the build leaves the CUDA backend out, and says why.
fetch_headers() {
  local pkg=$1 version=$2 wheel=$3 sha256=$4 folder=$5 dest=$6
  shift 6
  dest=$(in_cache "$(basename "$dest")" "$pkg $version $sha256")
  [[ "$(cat "$dest/VERSION" 2>/dev/null)" == "$version" ]] && return 0
  echo "setup: fetching the headers of $pkg $version (PyPI) into third_party/"
  local tmp
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: "$@" -d "$tmp" "$pkg==$version" &&
     echo "$sha256  $tmp/$wheel" | sha256sum -c --quiet; then
    rm -rf "$dest" && mkdir -p "$dest"
    python3 -m zipfile -e "$tmp/$wheel" "$tmp/unpacked"
    mv "$tmp/unpacked/$folder" "$dest/include"
    echo "$version" > "$dest/VERSION"
  else
    echo "setup: could not fetch $pkg $version; the build leaves the CUDA backend out" >&2
  fi
  rm -rf "$tmp"
}
third_party="$(cd "$(dirname "$0")/.." && pwd)/third_party"
# What is fetched or built from pinned versions is kept once per machine, in
# ~/.cache/trainer/third_party under a name that holds a hash of its pins, and
# third_party/NAME links there: a second clone (CI's clean one) reuses it
# instead of fetching and installing again (a venv cannot be moved, so it is
# built where it stays). A third_party/NAME that is a directory of its own is
# left as it is.
#   in_cache NAME PINS: prints where third_party/NAME's content lives.
in_cache() {
  local at="$third_party/$1" key
  if [[ -d "$at" && ! -L "$at" ]]; then echo "$at"; return; fi
  key=$(printf '%s' "$2" | sha256sum | cut -c1-16)
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/trainer/third_party/$1-$key"
  mkdir -p "$dir" "$third_party" && ln -sfn "$dir" "$at"
  echo "$dir"
}
# One setup at a time fills the cache (another clone's waits here).
mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/trainer"
exec 9>"${XDG_CACHE_HOME:-$HOME/.cache}/trainer/setup.lock"
flock 9
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  # The cuDNN frontend: header-only (MIT); any wheel of the version holds the
  # same headers, so one pinned file is named whatever the local Python is.
  fetch_headers nvidia-cudnn-frontend 1.32.0 \
    nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl \
    c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0 include "$third_party/cudnn_frontend" \
    --python-version 3.11 --platform manylinux_2_28_x86_64
  # NVML's header (nvml.h; the library comes with the driver and is loaded
  # at run time) for trainer health's GPU figures: pinned, as the code names
  # what older headers (a CUDA 12.0 toolkit's) lack.
  fetch_headers nvidia-nvml-dev 13.0.87 nvidia_nvml_dev-13.0.87-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl \
    082871368275cf6620fc900f55d8eaf2563b263a38a00a5168e9650bce963ba1 nvidia/cu13/include "$third_party/nvml"
fi

# Tests: reference packages from PyPI, pinned, in a venv over Debian's python
# (so its torch 1.13, numpy and h5py stay visible; numpy is pinned to
# Debian's own, since a pip numpy 2 breaks torch 1.13): tiktoken and
# sentencepiece (tests/e2e/tokenizer_check.py), transformers 4.46.3, the newest
# 4.x we found that runs models on torch 1.13, with Llama's GQA, rope_theta
# and Llama 3 RoPE scaling (tests/e2e/hf_export_check.py), tensorboard for its
# event-file reader (tests/e2e/tensorboard_check.py); and the tokenizer files
# (fetch_tokenizers.sh). transformers 5 needs a newer torch, so it gets a
# venv of its own without Debian's packages (third_party/hf5): torch 2.11.0
# (PyPI's wheel, CUDA libraries included; here it runs on the CPU),
# transformers 5.25.0 and llama.cpp as llama-cpp-python 0.3.36 builds it from
# its sdist (about 3 minutes on 2 cores, once: the wheel, built for any
# x86-64 with AVX2, is kept in ~/.cache/trainer/wheels for the next clone), for
# tests/e2e/llama_cpp_check.py and the config.json files transformers 5 writes
# (tests/e2e/hf_export_check.py). llama.cpp's converter (convert_hf_to_gguf.py, its
# conversion/ modules and gguf-py) comes from the same sdist, checked against
# its SHA-256, into third_party/llama_cpp.
if [[ "${1:-}" == "test" ]]; then
  root="$(cd "$(dirname "$0")/.." && pwd)"
  numpy_version="$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)')"
  pyref_pins=(tiktoken==0.12.0 sentencepiece==0.2.1 transformers==4.46.3 huggingface_hub==0.36.2
              safetensors==0.8.0 tokenizers==0.20.3 tensorboard==2.21.0 "numpy==$numpy_version")
  venv=$(in_cache pyref "$(/usr/bin/python3 -V) ${pyref_pins[*]}")
  if ! "$venv/bin/python" -c "import tiktoken, sentencepiece, tensorboard, transformers as t; assert t.__version__ == '4.46.3'" 2>/dev/null; then
    echo "setup: installing tiktoken, sentencepiece, transformers and tensorboard (PyPI) into third_party/pyref"
    /usr/bin/python3 -m venv --clear --system-site-packages "$venv" &&
      "$venv/bin/pip" install -q "${pyref_pins[@]}" ||
      echo "setup: could not install the reference packages; the tests that compare with them will fail" >&2
  fi
  llcpp_version=0.3.36
  llcpp_sdist=llama_cpp_python-$llcpp_version.tar.gz
  llcpp_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
  hf5_pins=(torch==2.11.0 transformers==5.25.0 sentencepiece==0.2.1 numpy==2.2.6 protobuf==4.25.9 safetensors==0.8.0
            tiktoken==0.12.0)
  hf5=$(in_cache hf5 "$(/usr/bin/python3 -V) ${hf5_pins[*]} $llcpp_sha256")
  llcpp=$(in_cache llama_cpp "$llcpp_sha256")
  wheels="${XDG_CACHE_HOME:-$HOME/.cache}/trainer/wheels"
  if ! "$hf5/bin/python" -c "import torch, gguf, tiktoken, llama_cpp as l, transformers as t
assert t.__version__ == '5.25.0' and l.__version__ == '$llcpp_version'" 2>/dev/null ||
     [[ ! -f "$llcpp/convert_hf_to_gguf.py" ]]; then
    echo "setup: installing torch 2.11.0, transformers 5.25.0 and llama.cpp (llama-cpp-python $llcpp_version," \
         "built here) from PyPI into third_party/hf5, llama.cpp's converter into third_party/llama_cpp"
    tmp_ll=$(mktemp -d)
    if python3 -m pip download -q --no-deps --no-binary=:all: -d "$tmp_ll" "llama-cpp-python==$llcpp_version" &&
       echo "$llcpp_sha256  $tmp_ll/$llcpp_sdist" | sha256sum -c --quiet &&
       tar -xzf "$tmp_ll/$llcpp_sdist" -C "$tmp_ll" &&
       rm -rf "${llcpp:?}"/* &&
       cp -r "$tmp_ll/llama_cpp_python-$llcpp_version/vendor/llama.cpp/"{convert_hf_to_gguf.py,conversion,gguf-py,LICENSE} \
         "$llcpp/" &&
       /usr/bin/python3 -m venv --clear "$hf5" &&
       "$hf5/bin/pip" install -q "${hf5_pins[@]}" "$llcpp/gguf-py" &&
       { compgen -G "$wheels/llama_cpp_python-$llcpp_version-*.whl" >/dev/null ||
         CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
           "$hf5/bin/pip" wheel -q --no-deps -w "$wheels" "$tmp_ll/$llcpp_sdist"; } &&
       "$hf5/bin/pip" install -q "$wheels"/llama_cpp_python-"$llcpp_version"-*.whl; then
      :
    else
      echo "setup: could not install transformers 5 and llama.cpp; tests/e2e/llama_cpp_check.py and the check of" \
           "transformers 5's config.json files will fail" >&2
    fi
    rm -rf "$tmp_ll"
  fi
  in_cache tokenizers "$(sha256sum < "$root/scripts/fetch_tokenizers.sh")" >/dev/null
  "$root/scripts/fetch_tokenizers.sh" || echo "setup: some tokenizer files are missing (see above)" >&2
fi
