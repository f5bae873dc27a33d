#!/usr/bin/env bash
# Builds llama.cpp's llama-server (CPU only) and writes the tiny random-weight
# model the tests in this folder run it on, once per machine.
#
# There is no Debian package of llama.cpp, and the machines reach no network
# but package registries, so the source comes through npm: node-llama-cpp
# carries the llama.cpp tree it was built from as a git bundle
# (llama/gitRelease.bundle). The version is pinned in node-llama-cpp.version.
#
# The result lives outside the repository (CI runs in a fresh clone), in
#   ${VIGIL_CACHE_DIR:-$HOME/.cache/vigil}/llama.cpp/node-llama-cpp-<version>/
#     bin/llama-server  tiny-llama.gguf
# and is reused when present: a second run costs nothing. The last line of
# output is that directory (test.sh exports it as VIGIL_LLAMACPP_DIR).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(tr -d ' \n' <"$here/node-llama-cpp.version")
dir="${VIGIL_CACHE_DIR:-$HOME/.cache/vigil}/llama.cpp/node-llama-cpp-$version"
bin="$dir/bin/llama-server"
model="$dir/tiny-llama.gguf"
mkdir -p "$dir"

if [ ! -x "$bin" ]; then
  for tool in npm git cmake c++ tar; do
    command -v "$tool" >/dev/null || { echo "llamacpp/build.sh: $tool is missing" >&2; exit 1; }
  done
  work=$(mktemp -d "$dir/build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "llamacpp/build.sh: building llama-server from node-llama-cpp@$version (a few minutes, once per machine)" >&2
  (cd "$work" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
  tar -xzf "$work/node-llama-cpp-$version.tgz" -C "$work" package/llama/gitRelease.bundle
  git clone --quiet "$work/package/llama/gitRelease.bundle" "$work/src" 2>/dev/null
  # CPU only, one static binary, and nothing fetched at build time: no
  # prebuilt web UI from Hugging Face, no npm build of it, no TLS client
  # (the server's model download from URLs is the only user of it).
  # A unity build (each library's sources compiled a batch at a time, so
  # the heavy headers, JSON's above all, are parsed once a batch), and the
  # code the tests never run unoptimised (coldcode.cmake): 0.73x the
  # build's CPU time (bench/README.md, "CI time, round two").
  cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_PROJECT_INCLUDE="$here/coldcode.cmake" \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_LLGUIDANCE=OFF \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_OPENMP=ON >"$work/cmake.log" 2>&1 \
    || { tail -40 "$work/cmake.log" >&2; exit 1; }
  cmake --build "$work/build" --target llama-server -j "${VIGIL_BUILD_JOBS:-$(nproc)}" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }
  mkdir -p "$dir/bin"
  # gguf-py, the writer the model script uses, from the same tree.
  rm -rf "$dir/gguf-py" && cp -r "$work/src/gguf-py" "$dir/gguf-py"
  install -m 0755 "$work/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
fi

if [ ! -s "$model" ]; then
  # Debian's python3 has numpy; a pyenv shim earlier on PATH may not.
  py=/usr/bin/python3; [ -x "$py" ] || py=python3
  PYTHONPATH="$dir/gguf-py" "$py" "$here/tinymodel.py" "$model.tmp" && mv "$model.tmp" "$model"
fi
echo "$dir"
