// CRC32C (Castagnoli, the iSCSI/ext4 polynomial 0x1EDC6F41, reflected 0x82F63B78): the swap
// store's per-block checksum. The SSE4.2 crc32 instruction where the CPU has it (chosen once, at
// run time), else a slicing-by-8 table; both give the same value (tests/offload/crc32c_test.cpp).
// Pure arithmetic on caller memory: no allocation after the table, no threads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zt {

// The CRC32C of `bytes` bytes at `data`, continuing from `crc` (0 for a fresh one):
// crc32c(ab) == crc32c(b, crc32c(a)). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// The two implementations, for tests and benchmarks. crc32c_hardware requires
// crc32c_hardware_available().
uint32_t crc32c_table(const void* data, size_t bytes, uint32_t crc = 0);
uint32_t crc32c_hardware(const void* data, size_t bytes, uint32_t crc = 0);
bool crc32c_hardware_available();

}  // namespace zt
