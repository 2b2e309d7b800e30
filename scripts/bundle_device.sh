#!/usr/bin/env bash
# Packs what tests/gpu/device_check.sh needs on a GPU machine that may have no package access:
# the executables and test binaries it runs (zt-train, zt-bench, zt_runtime_tests,
# zt_mpi_device_comm_tests, zt_mpi_device_engine_tests; built here with the CUDA back end),
# every shared library they load except glibc and what the GPU machine already has (the CUDA
# driver, runtime, cuBLAS, cuDNN and NCCL: device_check.sh finds those on the machine, in the
# toolkit or in Python's nvidia-* wheels, and its preflight names any that ldd cannot resolve),
# a relocatable
# copy of Open MPI (mpirun, orted, its plugins and help files; OPAL_PREFIX points at it), and
# cuda_version, the CUDA runtime we built with (the preflight compares the driver against it).
# Result: BUILD_DIR/device-bundle.tar.xz (or OUT_DIR/device-bundle.tar.xz), to carry to the
# machine beside data/corpus; the last line gives its size in bytes (the device tool carries at
# most 64 MiB in all; e2e.device_check_dry_run asserts the bundle stays under 48 MiB).
# Usage: scripts/bundle_device.sh [BUILD_DIR [OUT_DIR]]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
dest=${2:-$build}
mkdir -p "$dest"
out=$(cd "$dest" && pwd)/device-bundle
[ -x "$build/bin/zt-train" ] || { echo "bundle_device: no $build/bin/zt-train; run scripts/build.sh first" >&2; exit 2; }
grep -q "ZT_HAVE_CUDA:INTERNAL=ON\|ZT_HAVE_CUDA=1" "$build/CMakeCache.txt" "$build/runtime/CMakeFiles/zt_runtime.dir/flags.make" 2>/dev/null ||
  echo "bundle_device: warning: $build was configured without the CUDA back end" >&2
rm -rf "$out" "$out.tar.xz"
mkdir -p "$out/bin" "$out/lib" "$out/openmpi/bin"

binaries=("$build/bin/zt-train" "$build/bin/zt-bench" "$build/tests/zt_runtime_tests"
          "$build/tests/mpi/zt_mpi_device_comm_tests" "$build/tests/mpi/zt_mpi_device_engine_tests")
for b in "${binaries[@]}"; do
  [ -x "$b" ] || { echo "bundle_device: no $b; build it first (device_check.sh runs it)" >&2; exit 2; }
done
cp "${binaries[@]}" "$out/bin/"
sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")$/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake |
  head -n 1 > "$out/cuda_version"

# Open MPI, laid out under its own prefix as Debian's build expects it relative to OPAL_PREFIX.
multiarch=$(gcc -print-multiarch)
pkglib=/usr/lib/$multiarch/openmpi/lib/openmpi3
cp -L /usr/bin/mpirun "$out/openmpi/bin/mpirun"
cp -L /usr/bin/orted "$out/openmpi/bin/orted"
mkdir -p "$out/openmpi/lib/$multiarch/openmpi/lib" "$out/openmpi/share"
cp -r "$pkglib" "$out/openmpi/lib/$multiarch/openmpi/lib/"
cp -r /usr/share/openmpi "$out/openmpi/share/"

# The shared-library closure of everything above, minus what the machine must provide.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvidia)'
libs_of() { ldd "$1" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}'; }
mapfile -t files < <(printf '%s\n' "$out"/bin/* "$out"/openmpi/bin/* \
  "$out"/openmpi/lib/"$multiarch"/openmpi/lib/openmpi3/*.so)
declare -A seen=()
while [ "${#files[@]}" -gt 0 ]; do
  next=()
  for f in "${files[@]}"; do
    while read -r lib; do
      name=$(basename "$lib")
      [[ $name =~ $skip ]] && continue
      [ -n "${seen[$name]:-}" ] && continue
      seen[$name]=1
      cp -L "$lib" "$out/lib/$name"
      next+=("$lib")
    done < <(libs_of "$f")
  done
  files=("${next[@]+"${next[@]}"}")
done

XZ_OPT=-T0 tar -C "$(dirname "$out")" -cJf "$out.tar.xz" device-bundle
echo "bundle_device: $(du -sh "$out" | cut -f1) in $out, $(du -h "$out.tar.xz" | cut -f1) packed:" \
  "$out.tar.xz (${#seen[@]} libraries)"
echo "bundle_device: size_bytes $(stat -c %s "$out.tar.xz")"
